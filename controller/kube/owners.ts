/**
 * Owner references for the objects the controller creates itself, so that `helm uninstall` leaves
 * none of them behind: Kubernetes' garbage collector deletes an object once every owner it names
 * is gone.
 *
 * Why owner references rather than clean-up code: the garbage collector runs in every cluster and
 * acts whatever happened to the controller (killed, OOM, its node lost, `--no-hooks`), whereas a
 * clean-up on shutdown misses every exit that is not graceful, and a Helm pre-delete hook needs a
 * Job, its image and its own RBAC, and does not run with `helm uninstall --no-hooks`.
 *
 * - Per-replica objects (the replica-summary Lease) are owned by the replica's Pod: they go when
 *   that pod goes, so a rollout does not leave one Lease per pod that ever ran.
 * - Release-wide objects (the leader Lease, the self-managed TLS Secret) are owned by the
 *   controller's ServiceAccount, which the chart always creates and which `helm uninstall`
 *   deletes. Not the Deployment: the controller knows its ServiceAccount's name and UID from its
 *   own token without any API call or extra RBAC, while finding its Deployment would take reading
 *   its Pod and ReplicaSet. Not its Pod: the TLS Secret must outlive any one replica.
 *
 * `blockOwnerDeletion` is left unset: setting it needs delete permission on the owner where the
 * OwnerReferencesPermissionEnforcement admission plugin runs, and nothing needs foreground
 * deletion to wait for these objects.
 */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
}

export interface Owners {
  /** Of the objects that live as long as the release: the leader Lease, the TLS Secret. */
  release: OwnerReference[];
  /** Of the objects that live as long as this replica: its replica-summary Lease. */
  replica: OwnerReference[];
}

export const NO_OWNERS: Owners = { release: [], replica: [] };

/** Where a pod's service-account token is mounted (the in-cluster configuration reads it too). */
export const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

export interface OwnerSources {
  /** The controller's own service-account token (a JWT), when it runs in a pod. */
  token: string | undefined;
  /** The namespace the controller's objects are made in (the Lease namespace). */
  namespace: string;
  /** This replica's Pod (the chart passes both through the downward API). */
  pod: { name: string; uid: string } | undefined;
}

/**
 * The owners, and a note for each kind that has none (logged: those objects outlive the release).
 * The token's claims are read, not verified: it is the controller's own credential, and a wrong
 * UID only means an owner reference the garbage collector finds dangling.
 */
export function ownersOf(sources: OwnerSources): { owners: Owners; notes: string[] } {
  const notes: string[] = [];
  const replica: OwnerReference[] =
    sources.pod === undefined || sources.pod.uid === '' || sources.pod.name === ''
      ? []
      : [{ apiVersion: 'v1', kind: 'Pod', name: sources.pod.name, uid: sources.pod.uid }];
  if (replica.length === 0)
    notes.push('no pod UID (POD_UID): the replica-summary Lease outlives this replica');
  const account = serviceAccountOf(sources.token);
  let release: OwnerReference[] = [];
  if (account === undefined) {
    notes.push(
      'no service-account token with its claims: the leader Lease and TLS Secret outlive the release',
    );
  } else if (account.namespace !== sources.namespace) {
    notes.push(
      `the service account is in ${account.namespace}, not ${sources.namespace}: the leader Lease and TLS Secret outlive the release`,
    );
  } else {
    release = [{ apiVersion: 'v1', kind: 'ServiceAccount', name: account.name, uid: account.uid }];
  }
  return { owners: { release, replica }, notes };
}

/**
 * A service account's identity from its token's claims: bound (projected) tokens carry
 * `kubernetes.io: {namespace, serviceaccount: {name, uid}}`; legacy Secret tokens carry
 * `kubernetes.io/serviceaccount/...` claims.
 */
export function serviceAccountOf(
  token: string | undefined,
): { namespace: string; name: string; uid: string } | undefined {
  const payload = token?.trim().split('.')[1];
  if (payload === undefined) return undefined;
  let claims: Record<string, unknown>;
  try {
    claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<
      string,
      unknown
    >;
  } catch {
    return undefined;
  }
  const bound = claims['kubernetes.io'] as
    { namespace?: unknown; serviceaccount?: { name?: unknown; uid?: unknown } } | undefined;
  const namespace = bound?.namespace ?? claims['kubernetes.io/serviceaccount/namespace'];
  const name =
    bound?.serviceaccount?.name ?? claims['kubernetes.io/serviceaccount/service-account.name'];
  const uid =
    bound?.serviceaccount?.uid ?? claims['kubernetes.io/serviceaccount/service-account.uid'];
  if (typeof namespace !== 'string' || typeof name !== 'string' || typeof uid !== 'string')
    return undefined;
  if (namespace === '' || name === '' || uid === '') return undefined;
  return { namespace, name, uid };
}

/** `ownerReferences` with `owners` in it (others kept): what to write, or undefined if unchanged. */
export function withOwners(
  existing: readonly OwnerReference[] | undefined,
  owners: readonly OwnerReference[],
): OwnerReference[] | undefined {
  const current = existing ?? [];
  const missing = owners.filter((o) => !current.some((c) => c.uid === o.uid));
  return missing.length === 0 ? undefined : [...current, ...missing];
}
