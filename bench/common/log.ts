/** Progress lines of a bench, on stderr (stdout carries its report). */
export function stderrLog(prefix = ''): (line: string) => void {
  return (line) => void process.stderr.write(`${prefix}${line}\n`);
}
