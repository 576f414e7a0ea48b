// `npm test`'s first step (pretest): one line saying which Node the project needs and how to get
// it, instead of a type-stripping error from the first test file. Plain JavaScript that old Node
// parses. npm scripts run on the project's own Node 24 (the `node` devDependency puts it first on
// their PATH), so this fails only when that is missing, e.g. after `npm ci --ignore-scripts`.
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
  process.stderr.write(
    `switchyard needs Node >= 22.19 (Node 24 LTS); npm ran ${process.version} (${process.execPath}). ` +
      'Run `npm ci` (with install scripts) to get the project’s Node 24, or put Node 24 first on ' +
      'PATH (`source scripts/setup-node.sh`).\n',
  );
  process.exit(1);
}
