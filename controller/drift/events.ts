/**
 * The Kubernetes Events of drift detection (docs/drift.md): one when an endpoint starts to answer
 * another fingerprint than its pool expects, one when it answers the expected one again, and one
 * when the majority is lost (no fingerprint is held by more than half of the endpoints).
 */
export interface DriftChangeView {
  kind: 'drifted' | 'cleared' | 'undecided';
  endpoint?: string | undefined;
  fingerprint?: string | undefined;
  expected?: string | undefined;
}

export const DriftReason = {
  EndpointDrifted: 'EndpointDrifted',
  EndpointDriftCleared: 'EndpointDriftCleared',
  DriftUndecided: 'DriftUndecided',
} as const;

export function driftEvent(
  change: DriftChangeView,
  action: 'Exclude' | 'Warn',
): { type: 'Normal' | 'Warning'; reason: string; message: string } {
  switch (change.kind) {
    case 'drifted':
      return {
        type: 'Warning',
        reason: DriftReason.EndpointDrifted,
        message:
          `Endpoint ${change.endpoint ?? '?'} answers ${change.fingerprint ?? '?'}, the pool expects ${change.expected ?? '?'}: ` +
          (action === 'Exclude'
            ? 'it gets no traffic until it answers the expected fingerprint again'
            : 'it still gets traffic (drift.action Warn)'),
      };
    case 'cleared':
      return {
        type: 'Normal',
        reason: DriftReason.EndpointDriftCleared,
        message: `Endpoint ${change.endpoint ?? '?'} answers the expected ${change.expected ?? 'fingerprint'} again${action === 'Exclude' ? ': back in routing' : ''}`,
      };
    case 'undecided':
      return {
        type: 'Warning',
        reason: DriftReason.DriftUndecided,
        message:
          'The endpoints answer different fingerprints and none is held by more than half of them: no endpoint is judged drifted (set drift.expect to the fingerprint you want to decide it)',
      };
  }
}
