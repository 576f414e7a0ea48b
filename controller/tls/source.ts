/**
 * Where the controller's serving certificate (snapshot stream and injection webhook) comes from,
 * and how it stays current without a restart:
 *
 * - files (`--tls-cert-file`, `--tls-key-file`, `--tls-ca-file`): a mounted Secret, e.g. written by
 *   cert-manager; re-read every `checkEveryMs`, a new valid pair is served at once;
 * - self-managed (`--tls-secret`): the controller makes a CA and a serving certificate in a Secret
 *   when none is there, renews the serving certificate under the same CA, and adopts what another
 *   replica wrote (the Secret is re-read every `checkEveryMs`).
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { planTls } from './plan.ts';
import { KubeApiError, type KubeRaw } from '../kube/kube-raw.ts';
import { withOwners, type OwnerReference } from '../kube/owners.ts';
import {
  createCa,
  inspectTlsSecret,
  issueServingCertificate,
  type TlsMaterial,
} from './certificates.ts';

export type { TlsMaterial };

/** Where the serving certificate comes from (the `--tls-*` flags). */
export type TlsConfig =
  | { kind: 'files'; files: TlsFiles }
  | { kind: 'self-managed'; namespace: string; secretName: string; names: string[] };

/** The source `config` names, serving from now on; undefined without one (plain HTTP, tests only). */
export async function startTlsSource(
  config: TlsConfig | undefined,
  deps: { raw: KubeRaw; logger: Logger; ownerReferences?: readonly OwnerReference[] },
): Promise<TlsSource | undefined> {
  switch (config?.kind) {
    case undefined:
      return undefined;
    case 'files':
      return new FileTlsSource(config.files, deps.logger);
    case 'self-managed':
      return SelfManagedTlsSource.start({ ...deps, ...config });
  }
}

export interface TlsSource {
  current(): TlsMaterial;
  /** Called after the material changed; the stream server and the webhook's caBundle follow. */
  onChange(listener: (material: TlsMaterial) => void): void;
  stop(): void;
}

class Listeners {
  private readonly list: ((m: TlsMaterial) => void)[] = [];
  add(listener: (m: TlsMaterial) => void): void {
    this.list.push(listener);
  }
  emit(m: TlsMaterial): void {
    for (const l of this.list) l(m);
  }
}

const sameMaterial = (a: TlsMaterial, b: TlsMaterial): boolean =>
  a.cert === b.cert && a.key === b.key && a.ca === b.ca;

/** A certificate file set; `ca` defaults to the certificate's own chain when no CA file is given. */
export interface TlsFiles {
  certFile: string;
  keyFile: string;
  caFile: string | undefined;
}

/** Reads the files; throws with the file and the problem when they are unreadable or do not match. */
export function readTlsFiles(files: TlsFiles): TlsMaterial {
  const read = (path: string): string => {
    try {
      return readFileSync(path, 'utf8');
    } catch (err) {
      throw new Error(`cannot read ${path}: ${(err as Error).message}`, { cause: err });
    }
  };
  const material: TlsMaterial = {
    cert: read(files.certFile),
    key: read(files.keyFile),
    ca: files.caFile === undefined ? '' : read(files.caFile),
  };
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(material.cert);
  } catch (err) {
    throw new Error(`${files.certFile} is not a PEM certificate`, { cause: err });
  }
  let key;
  try {
    key = createPrivateKey(material.key);
  } catch (err) {
    throw new Error(`${files.keyFile} is not a PEM private key`, { cause: err });
  }
  if (!cert.checkPrivateKey(key))
    throw new Error(`${files.keyFile} is not the private key of ${files.certFile}`);
  if (material.ca === '') material.ca = material.cert;
  return material;
}

export class FileTlsSource implements TlsSource {
  private material: TlsMaterial;
  private readonly listeners = new Listeners();
  private readonly timer: NodeJS.Timeout;

  constructor(files: TlsFiles, logger: Logger, checkEveryMs = 30_000) {
    this.material = readTlsFiles(files);
    // Secret volumes update by swapping a symlink, which file watchers report unreliably:
    // reading three small files every half minute is simpler and always right.
    this.timer = setInterval(() => {
      let next: TlsMaterial;
      try {
        next = readTlsFiles(files);
      } catch (err) {
        // Mid-update (a new certificate beside the old key) or removed: keep serving the last good.
        logger.warn({ err: (err as Error).message }, 'TLS files unusable; keeping the last good');
        return;
      }
      if (sameMaterial(next, this.material)) return;
      this.material = next;
      logger.info({ certFile: files.certFile }, 'TLS certificate reloaded from files');
      this.listeners.emit(next);
    }, checkEveryMs);
    this.timer.unref();
  }

  current(): TlsMaterial {
    return this.material;
  }
  onChange(listener: (m: TlsMaterial) => void): void {
    this.listeners.add(listener);
  }
  stop(): void {
    clearInterval(this.timer);
  }
}

interface SecretObject {
  metadata: { name: string; namespace?: string; resourceVersion?: string; [k: string]: unknown };
  type?: string;
  data?: Record<string, string>;
  [k: string]: unknown;
}

const KEYS = { cert: 'tls.crt', key: 'tls.key', ca: 'ca.crt', caKey: 'ca.key' } as const;

const decode = (data: Record<string, string> | undefined, key: string): string | undefined => {
  const value = data?.[key];
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
};

function materialOf(secret: SecretObject): Partial<TlsMaterial> {
  return {
    cert: decode(secret.data, KEYS.cert),
    key: decode(secret.data, KEYS.key),
    ca: decode(secret.data, KEYS.ca),
    caKey: decode(secret.data, KEYS.caKey),
  };
}

export interface SelfManagedTlsOptions {
  raw: KubeRaw;
  namespace: string;
  secretName: string;
  /** DNS names and IP addresses the serving certificate must cover. */
  names: readonly string[];
  logger: Logger;
  /** How often the Secret is read again (renewal, other replicas' writes). Default 60 s. */
  checkEveryMs?: number;
  now?: () => number;
  /** Owners of the Secret, so that it goes with the release (owners.ts). */
  ownerReferences?: readonly OwnerReference[];
}

export class SelfManagedTlsSource implements TlsSource {
  private material!: TlsMaterial;
  private readonly listeners = new Listeners();
  private timer: NodeJS.Timeout | undefined;
  private readonly options: SelfManagedTlsOptions;
  private readonly path: string;
  private checking = false;

  private constructor(options: SelfManagedTlsOptions) {
    this.options = options;
    this.path = `/api/v1/namespaces/${encodeURIComponent(options.namespace)}/secrets`;
  }

  /** Ensures the Secret holds a usable certificate (creating or renewing it), then keeps it so. */
  static async start(options: SelfManagedTlsOptions): Promise<SelfManagedTlsSource> {
    const source = new SelfManagedTlsSource(options);
    source.material = await source.ensure();
    source.timer = setInterval(() => void source.check(), options.checkEveryMs ?? 60_000);
    source.timer.unref();
    return source;
  }

  current(): TlsMaterial {
    return this.material;
  }
  onChange(listener: (m: TlsMaterial) => void): void {
    this.listeners.add(listener);
  }
  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
  }

  private async check(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      const next = await this.ensure();
      if (!sameMaterial(next, this.material)) {
        this.material = next;
        this.listeners.emit(next);
      }
    } catch (err) {
      this.options.logger.warn(
        {
          secret: `${this.options.namespace}/${this.options.secretName}`,
          err: (err as Error).message,
        },
        'cannot check the TLS Secret; serving the current certificate',
      );
    } finally {
      this.checking = false;
    }
  }

  /** The Secret's metadata with this controller's owners added (others kept). */
  private ownedMetadata(secret: SecretObject): SecretObject['metadata'] {
    const existing = secret.metadata.ownerReferences as OwnerReference[] | undefined;
    const owners = withOwners(existing, this.options.ownerReferences ?? []);
    return owners === undefined ? secret.metadata : { ...secret.metadata, ownerReferences: owners };
  }

  /**
   * A Secret made before it had owners (an upgrade from a version without them) gets them now
   * rather than at its next renewal, months away. Best effort: a lost race or a refusal is retried
   * at the next check.
   */
  private async adopt(secret: SecretObject): Promise<void> {
    const metadata = this.ownedMetadata(secret);
    if (metadata === secret.metadata) return;
    try {
      await this.options.raw.request(
        'PUT',
        `${this.path}/${encodeURIComponent(this.options.secretName)}`,
        { ...secret, metadata },
      );
    } catch (err) {
      this.options.logger.info(
        {
          secret: `${this.options.namespace}/${this.options.secretName}`,
          err: (err as Error).message,
        },
        'cannot add owner references to the TLS Secret yet',
      );
    }
  }

  private async read(): Promise<SecretObject | undefined> {
    try {
      return await this.options.raw.request<SecretObject>(
        'GET',
        `${this.path}/${encodeURIComponent(this.options.secretName)}`,
      );
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return undefined;
      throw err;
    }
  }

  /** Reads the Secret, fixes what the plan says, and returns what to serve. Races end in a re-read. */
  private async ensure(): Promise<TlsMaterial> {
    const { logger, names, namespace, secretName } = this.options;
    const now = this.options.now ?? Date.now;
    for (let attempt = 1; ; attempt++) {
      const secret = await this.read();
      const existing = secret === undefined ? undefined : materialOf(secret);
      const plan = planTls(
        existing === undefined ? undefined : inspectTlsSecret(existing),
        names,
        now(),
      );
      if (plan.kind === 'keep') {
        await this.adopt(secret!);
        return {
          cert: existing!.cert!,
          key: existing!.key!,
          ca: existing!.ca!,
          caKey: existing!.caKey,
        };
      }
      const ca =
        plan.kind === 'create-ca'
          ? await createCa(`switchyard CA (${namespace}/${secretName})`, now())
          : { ca: existing!.ca!, caKey: existing!.caKey! };
      const serving = await issueServingCertificate(ca, names, now());
      const material: TlsMaterial = { ...serving, ...ca };
      const data = {
        [KEYS.cert]: Buffer.from(material.cert).toString('base64'),
        [KEYS.key]: Buffer.from(material.key).toString('base64'),
        [KEYS.ca]: Buffer.from(material.ca).toString('base64'),
        [KEYS.caKey]: Buffer.from(material.caKey!).toString('base64'),
      };
      try {
        if (secret === undefined) {
          await this.options.raw.request('POST', this.path, {
            apiVersion: 'v1',
            kind: 'Secret',
            type: 'kubernetes.io/tls',
            metadata: {
              name: secretName,
              namespace,
              labels: { 'app.kubernetes.io/managed-by': 'switchyard-controller' },
              ownerReferences: [...(this.options.ownerReferences ?? [])],
            },
            data,
          });
        } else {
          // resourceVersion makes this a compare-and-swap: a replica that lost the race re-reads.
          await this.options.raw.request('PUT', `${this.path}/${encodeURIComponent(secretName)}`, {
            ...secret,
            metadata: this.ownedMetadata(secret),
            data: { ...secret.data, ...data },
          });
        }
      } catch (err) {
        if (err instanceof KubeApiError && err.status === 409 && attempt < 5) {
          logger.info(
            { secret: `${namespace}/${secretName}` },
            'TLS Secret written by another replica; re-reading',
          );
          continue;
        }
        throw new Error(
          `cannot write the TLS Secret ${namespace}/${secretName}: ${(err as Error).message}`,
          { cause: err },
        );
      }
      logger.info(
        { secret: `${namespace}/${secretName}`, action: plan.kind, reason: plan.reason, names },
        plan.kind === 'create-ca'
          ? 'created a CA and a serving certificate'
          : 'issued a new serving certificate',
      );
      return material;
    }
  }
}
