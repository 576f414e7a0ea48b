/** What the server and the clients of `npm run bench:stream-memory` agree on. */
export const NAMESPACE = 'bench';
