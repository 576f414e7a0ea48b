import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface ServingTls {
  caFile: string;
  certFile: string;
  keyFile: string;
}

/**
 * A throw-away CA and a serving certificate for 127.0.0.1 and localhost (EC P-256, one day), made
 * with the openssl CLI in `dir`: what the controller's snapshot stream serves in tests and benches.
 */
export function makeServingTls(dir: string, commonName = 'switchyard-controller'): ServingTls {
  const run = (args: string[]): void => {
    execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run([
    'req',
    '-x509',
    ...ec,
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '1',
    '-subj',
    `/CN=${commonName}-ca`,
  ]);
  run(['req', ...ec, '-keyout', 'tls.key', '-out', 'tls.csr', '-subj', `/CN=${commonName}`]);
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  run([
    'x509',
    '-req',
    '-in',
    'tls.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'tls.crt',
    '-days',
    '1',
    '-extfile',
    'san.ext',
  ]);
  return {
    caFile: join(dir, 'ca.crt'),
    certFile: join(dir, 'tls.crt'),
    keyFile: join(dir, 'tls.key'),
  };
}
