# Source this file: puts Node 24 first on PATH when the machine's Node is older than 22.19.
# Node comes from the npm registry (the `node` package), cached under ~/.cache/switchyard/node24.
_sy_node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=19)?0:1)'
}
if ! _sy_node_ok; then
  _sy_prefix="${HOME}/.cache/switchyard/node24"
  if [ ! -x "${_sy_prefix}/node_modules/.bin/node" ]; then
    echo "switchyard: installing Node 24 from the npm registry into ${_sy_prefix}" >&2
    npm install --no-save --prefix "${_sy_prefix}" node@24 >&2
  fi
  export PATH="${_sy_prefix}/node_modules/.bin:${PATH}"
fi
echo "switchyard: using node $(node --version) at $(command -v node)" >&2
unset -f _sy_node_ok
