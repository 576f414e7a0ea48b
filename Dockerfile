# One image for the controller and the sidecar. scripts/image/build.sh builds it with podman
# (npm test does, on first use); test/image/image-commands.test.ts also replays the commands
# below outside a container.

# --- build: the TypeScript compiled to JavaScript (needs the dev dependencies: typescript) -----
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY bin ./bin
COPY cli ./cli
COPY controller ./controller
COPY crds ./crds
COPY lib ./lib
COPY probe ./probe
COPY relay ./relay
COPY sidecar ./sidecar
COPY sim ./sim
COPY status ./status
RUN npm run build

# --- dependencies: production packages only -------------------------------------------------
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force

# --- runtime: production packages and the compiled JavaScript, nothing else ------------------
FROM node:24-bookworm-slim
ENV NODE_ENV=production
# jemalloc, which the chart preloads into the controller (controller.allocator): it gives the
# memory of closed TLS connections back to the kernel (docs/controller.md#memory-the-allocator).
# Linked at one path for every architecture; the sidecar does not load it.
RUN apt-get update && apt-get install -y --no-install-recommends libjemalloc2=5.3.0-1 && ln -s "$(dpkg -L libjemalloc2 | grep '/libjemalloc[.]so[.]2$')" /usr/local/lib/libjemalloc.so.2 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
# package.json says "type": "module" for dist/.
COPY package.json ./
COPY --from=build /app/dist ./dist
# Non-root (the restricted Pod Security Standard needs it), above 10000 so it is no user of the
# node; the files are root-owned and world-readable, and nothing is written outside /tmp.
USER 65532:65532
ENTRYPOINT ["node", "/app/dist/bin/switchyard.js"]
CMD ["--help"]
