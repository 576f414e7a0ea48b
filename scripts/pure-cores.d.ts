// Types of scripts/pure-cores.js (plain JavaScript, for ESLint's config), for TypeScript readers.
export interface PureCore {
  /** A file or glob of the core. */
  path: string;
  /** Whether `npm run test:unit` enforces its coverage. */
  coverage: boolean;
  /** Why its coverage is left to other tests, when it is. */
  why?: string;
}
export declare const PURE_CORES: readonly PureCore[];
export declare const NOT_PURE: readonly string[];
export declare const NOT_COVERED: readonly string[];
