# Vigil's node-agent image (a DaemonSet: deploy/helm/vigil).
#
#   build  type-checks src/ and bundles it into dist/ with esbuild (scripts/bundle.ts: tree-shaken,
#          about half the idle memory of per-file output with the Kubernetes client loaded), then
#          installs the production node_modules for the target architecture apart and drops what
#          Node never loads at run time (type declarations, source maps). Builds native RE2 (npm
#          re2: user and NPD rules run about 100 times faster than on re2js) from source with
#          python3, make and g++ (a cross g++ for another architecture) against the base's Node
#          headers (/usr/local/include/node), strips it, keeps re2.node.
#   final  Node 24 LTS, dist/, production node_modules and two host tools the monitors spawn:
#            ethtool    networking monitor: ENA allowance counters come only from `ethtool -S`
#            systemctl  runtime monitor: unit state and restart counts from the host's systemd,
#                       over the host's D-Bus socket (`systemctl show`)
#          No compiler, no npm, no npm cache, no source maps.
#
# Architectures: linux/amd64 and linux/arm64 (`podman build --platform linux/arm64`; test/deploy/
# build-image.sh ARCH, and test/deploy/arm64.test.ts, which runs the arm64 result under qemu).
# Both images are build arguments, so a site can use its own mirror or a hardened base. The final
# base must be Debian-like (apt-get, for the two tools) with Node >= 22.14 (24 LTS is what is
# tested) at /usr/local/bin/node: the entrypoint's --disable-sigusr1 needs it.
# test/deploy/image.test.ts builds this file with podman against a local Debian base that carries
# Node 24 from the npm registry (no container registry is reachable there) and runs the result
# under chroot.
ARG BUILD_IMAGE=docker.io/library/node:24-bookworm-slim
ARG BASE_IMAGE=docker.io/library/node:24-bookworm-slim

# The build stage runs on the build machine's own architecture ($BUILDPLATFORM) for every target:
# tsc and esbuild output is the same JavaScript everywhere, and only three things depend on the
# target (TARGETARCH, set by `podman build --platform` / buildx): the production node_modules'
# optional native packages (koffi's, chosen with npm's --cpu), and native RE2, cross-compiled with
# Debian's g++ for that target. Nothing is emulated here, so an arm64 image builds on amd64 about
# as fast as an amd64 one; only the final stage's apt-get runs under emulation.
FROM --platform=$BUILDPLATFORM ${BUILD_IMAGE} AS build
ARG TARGETARCH
WORKDIR /src
# npm's and GNU's names of the target; a cross compiler only when the target is not this machine.
RUN case "${TARGETARCH:-$(dpkg --print-architecture)}" in \
      amd64) echo "x64 x86_64-linux-gnu x86-64-linux-gnu" ;; \
      arm64) echo "arm64 aarch64-linux-gnu aarch64-linux-gnu" ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac > /tmp/target \
 && read -r npm_arch triplet pkg < /tmp/target \
 && cross="" && if [ "${TARGETARCH:-$(dpkg --print-architecture)}" != "$(dpkg --print-architecture)" ]; then cross="g++-$pkg"; fi \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 make g++ $cross \
 && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
# Install scripts stay off (koffi's would try to build); koffi's and esbuild's native code arrive as
# optional dependencies. Where egress re-signs TLS, pass that CA: `--secret id=ca,src=ca.pem`.
# /src: everything, for this machine (tsc, esbuild); /prod: production packages for the target.
RUN --mount=type=secret,id=ca,target=/run/secrets/ca.pem \
    if [ -s /run/secrets/ca.pem ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/ca.pem; fi \
 && read -r npm_arch triplet pkg < /tmp/target \
 && npm ci --ignore-scripts --no-audit --no-fund \
 && mkdir /prod && cp package.json package-lock.json /prod/ \
 && cd /prod && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --os=linux --cpu="$npm_arch" --libc=glibc \
 && npm cache clean --force
# re2 from source (its install script would first fetch a prebuilt binary from GitHub), with the
# headers of the Node it will run on (the same version on every architecture), not ones node-gyp
# downloads; for another architecture with that target's compiler. Loaded once where it can run.
RUN read -r npm_arch triplet pkg < /tmp/target \
 && cd /prod/node_modules/re2 \
 && if [ "$npm_arch" != "$(node -p process.arch)" ]; then \
      export CC="$triplet-gcc" CXX="$triplet-g++" LINK="$triplet-g++" AR="$triplet-ar"; strip="$triplet-strip"; \
    else strip=strip; fi \
 && npm_config_nodedir=/usr/local ../.bin/node-gyp rebuild --arch="$npm_arch" -j max \
 && "$strip" --strip-unneeded build/Release/re2.node \
 && mv build/Release/re2.node /tmp/re2.node \
 && rm -rf build && mkdir -p build/Release && mv /tmp/re2.node build/Release/ \
 && if [ "$npm_arch" = "$(node -p process.arch)" ]; then \
      node -e 'const RE2 = require("./re2.js"); if (new RE2("a(b)", "u").exec("xab")[1] !== "b") process.exit(1)'; fi
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build.sh scripts/bundle.ts scripts/slim-re2.ts ./scripts/
COPY src ./src
# tsx (with esbuild) is a dependency only so bin/vigil.js can run src/ when dist/ is missing; the
# image has dist/ and no src/, so it goes.
RUN npm run build \
 && cd /prod \
 && /src/node_modules/.bin/tsx /src/scripts/slim-re2.ts \
 && rm -rf node_modules/tsx node_modules/esbuild node_modules/@esbuild \
 && find node_modules \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' \) -type f -delete

FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ethtool iproute2 systemd \
 && apt-get clean \
 && rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/locale/* /var/lib/apt/lists/* /var/cache/apt /var/log/apt /var/log/dpkg.log \
      /usr/local/lib/node_modules/npm /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
      /usr/local/bin/yarn /usr/local/bin/yarnpkg /opt/yarn-* /root/.npm
WORKDIR /app
COPY --from=build /src/package.json ./
COPY --from=build /prod/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY bin ./bin
# Root inside the container: /dev/kmsg is a root device and the state directory is a root-owned
# hostPath. The chart takes every capability away except what the kernel log needs (see its values).
USER 0:0
ENV NODE_ENV=production
# SIGUSR1 must never open the inspector (it would run code as root for any local user): Node starts
# with it off; bin/vigil.js's own SIGUSR1 listener stays as the second line of defence.
ENTRYPOINT ["/usr/local/bin/node", "--disable-sigusr1", "/app/bin/vigil.js"]
CMD ["run"]
