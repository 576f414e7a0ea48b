/**
 * Pool file text → document. Pure: the sidecar reads the file and passes the text in.
 *
 * YAML (and so JSON) with one document. Syntax problems come back in the same `{path, message}`
 * shape as validation errors, with `path` = `line L, column C`. On success `lineOf` maps a
 * validation error's path (`spec.backends[1].url`) to the line it is on, so a message can say
 * where in the file to look.
 */
import {
  LineCounter,
  isMap,
  isNode,
  isScalar,
  isSeq,
  parseAllDocuments,
  type Document,
} from 'yaml';
import { type PoolError, ROOT_PATH, splitPath } from './path.ts';

export type PoolDocumentParse =
  | {
      ok: true;
      /** The parsed document, for `validatePool`. */
      document: unknown;
      /** 1-based line of the value at `path` (or of its nearest ancestor that exists). */
      lineOf(path: string): number | undefined;
    }
  | { ok: false; errors: PoolError[] };

/** YAML aliases expanded at most this often: a "billion laughs" file is an error, not a hang. */
const MAX_ALIAS_COUNT = 100;

export function parsePoolYaml(text: string): PoolDocumentParse {
  const lineCounter = new LineCounter();
  let docs: Document.Parsed[];
  try {
    const parsed = parseAllDocuments(text, { lineCounter, uniqueKeys: true, prettyErrors: false });
    docs = Array.isArray(parsed) ? parsed : [];
  } catch (err) {
    return { ok: false, errors: [{ path: ROOT_PATH, message: `is not YAML: ${messageOf(err)}` }] };
  }
  const at = (offset: number): string => {
    const { line, col } = lineCounter.linePos(offset);
    return `line ${line}, column ${col}`;
  };

  const errors: PoolError[] = [];
  for (const doc of docs) {
    for (const e of doc.errors) errors.push({ path: at(e.pos[0]), message: firstLine(e.message) });
  }
  if (errors.length > 0) return { ok: false, errors };

  const nonEmpty = docs.filter((d) => d.contents !== null);
  const [doc, second] = nonEmpty;
  if (second !== undefined) {
    return {
      ok: false,
      errors: [
        {
          path: at(second.range[0]),
          message: 'a pool file holds one document, and this is a second one (after ---)',
        },
      ],
    };
  }
  if (doc === undefined) {
    return { ok: false, errors: [{ path: ROOT_PATH, message: 'the pool file is empty' }] };
  }
  let document: unknown;
  try {
    document = doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (err) {
    return { ok: false, errors: [{ path: ROOT_PATH, message: firstLine(messageOf(err)) }] };
  }
  return {
    ok: true,
    document,
    lineOf(path: string): number | undefined {
      // The line of the key of each field on the way (a key, not its value, is what a person
      // looks for), as far as the path exists in the file.
      let node: unknown = doc.contents;
      let line = isNode(node) && node.range ? lineCounter.linePos(node.range[0]).line : undefined;
      for (const segment of splitPath(path)) {
        if (isMap(node)) {
          const pair = node.items.find(
            (p) => isScalar(p.key) && String(p.key.value) === String(segment),
          );
          if (pair === undefined) break;
          if (isNode(pair.key) && pair.key.range)
            line = lineCounter.linePos(pair.key.range[0]).line;
          node = pair.value;
        } else if (isSeq(node) && typeof segment === 'number') {
          const item: unknown = node.items[segment];
          if (!isNode(item) || !item.range) break;
          line = lineCounter.linePos(item.range[0]).line;
          node = item;
        } else break;
      }
      return line;
    },
  };
}

function firstLine(message: string): string {
  return message.split('\n')[0]?.trim() ?? message;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
