/** The objects an informer holds, by namespace and name, and what each list or event changed. */

/** The part of a Kubernetes object the cache looks at. */
export interface KubeObject {
  metadata?:
    | { name?: string; namespace?: string; resourceVersion?: string; managedFields?: unknown }
    | undefined;
}

/** A list response: its items and the resourceVersion a watch continues from. */
export interface KubeList<T> {
  metadata?: { resourceVersion?: string } | undefined;
  items: T[];
}

export type ChangeKind = 'add' | 'update' | 'delete';

export interface Change<T> {
  kind: ChangeKind;
  object: T;
}

const namespaceOf = (o: KubeObject): string => o.metadata?.namespace ?? '';
const nameOf = (o: KubeObject): string => o.metadata?.name ?? '';

export class ObjectCache<T extends KubeObject> {
  /** namespace → name → object; a namespace without objects has no entry. */
  readonly #objects = new Map<string, Map<string, T>>();

  get(name: string, namespace?: string): T | undefined {
    return this.#objects.get(namespace ?? '')?.get(name);
  }

  /** The objects of one namespace, or of all when `namespace` is undefined or empty. */
  list(namespace?: string): T[] {
    if (namespace === undefined || namespace === '') {
      const all: T[] = [];
      for (const objects of this.#objects.values()) all.push(...objects.values());
      return all;
    }
    return [...(this.#objects.get(namespace)?.values() ?? [])];
  }

  /**
   * Stores `object`: `add` when it is new, `update` when its resourceVersion differs (or is
   * unknown), undefined when this very version is already held.
   */
  upsert(object: T): ChangeKind | undefined {
    // Server-side apply's bookkeeping: nothing here reads it, and it is the bulk of a cached
    // object (an EndpointSlice's lists each endpoint again as nested empty objects: ~15 MB of a
    // replica's heap at 1,000 pools × 20 endpoints). Dropped as controller-runtime's
    // TransformStripManagedFields does; the object is this cache's own (parsed for it).
    // Rebuilt rather than `delete`d: a deleted property turns the object into a (larger) dictionary.
    if (object.metadata?.managedFields !== undefined) {
      const { managedFields: _, ...metadata } = object.metadata;
      object.metadata = metadata;
    }
    const namespace = namespaceOf(object);
    let objects = this.#objects.get(namespace);
    if (objects === undefined) {
      objects = new Map();
      this.#objects.set(namespace, objects);
    }
    const name = nameOf(object);
    const held = objects.get(name);
    if (held !== undefined) {
      const version = held.metadata?.resourceVersion;
      if (version !== undefined && version === object.metadata?.resourceVersion) return undefined;
    }
    objects.set(name, object);
    return held === undefined ? 'add' : 'update';
  }

  /** Removes the object of `object`'s namespace and name; the removed one, if it was held. */
  remove(object: KubeObject): T | undefined {
    const namespace = namespaceOf(object);
    const objects = this.#objects.get(namespace);
    const name = nameOf(object);
    const held = objects?.get(name);
    if (objects === undefined || held === undefined) return undefined;
    objects.delete(name);
    if (objects.size === 0) this.#objects.delete(namespace);
    return held;
  }

  /**
   * Makes the cache hold exactly `items` (a list): deletes of the objects no longer listed first,
   * then adds and updates, in the list's order.
   */
  replace(items: readonly T[]): Change<T>[] {
    const listed = new Map<string, Set<string>>();
    for (const item of items) {
      const namespace = namespaceOf(item);
      let names = listed.get(namespace);
      if (names === undefined) {
        names = new Set();
        listed.set(namespace, names);
      }
      names.add(nameOf(item));
    }
    const changes: Change<T>[] = [];
    for (const [namespace, objects] of this.#objects) {
      const names = listed.get(namespace);
      for (const [name, object] of objects) {
        if (names?.has(name) === true) continue;
        objects.delete(name);
        changes.push({ kind: 'delete', object });
      }
      if (objects.size === 0) this.#objects.delete(namespace);
    }
    for (const item of items) {
      const kind = this.upsert(item);
      if (kind !== undefined) changes.push({ kind, object: item });
    }
    return changes;
  }
}
