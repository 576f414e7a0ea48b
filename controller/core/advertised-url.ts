/**
 * The URL the other replicas reach this one's stream at: `streamUrl` with `address` as its host,
 * or as it is when it listens on a specific address; undefined on a wildcard without `address`.
 */
export function advertisedUrl(streamUrl: string, address: string | undefined): string | undefined {
  const url = new URL(streamUrl);
  if (address !== undefined && address !== '')
    url.hostname = address.includes(':') ? `[${address}]` : address;
  else if (['0.0.0.0', '[::]', ''].includes(url.hostname)) return undefined;
  return url.origin;
}
