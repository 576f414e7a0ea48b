# One image for the controller and the sidecar. No container engine runs on the development
# machines, so the build itself is not tested in CI; test/image/image-commands.test.ts runs the
# exact commands below (npm ci --omit=dev, the entrypoint) outside a container instead.

# --- dependencies: production packages only -------------------------------------------------
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force

# --- runtime --------------------------------------------------------------------------------
FROM node:24-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
# Node 24 runs the TypeScript sources directly (type stripping): no build step.
COPY package.json ./
COPY bin ./bin
COPY cli ./cli
COPY controller ./controller
COPY crds ./crds
COPY lib ./lib
COPY probe ./probe
COPY sidecar ./sidecar
COPY sim ./sim
COPY status ./status
# Non-root (the restricted Pod Security Standard needs it), above 10000 so it is no user of the
# node; the files are root-owned and world-readable, and nothing is written outside /tmp.
USER 65532:65532
ENTRYPOINT ["node", "/app/bin/switchyard.js"]
CMD ["--help"]
