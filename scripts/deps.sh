#!/usr/bin/env bash
# Installs everything Custos needs on a fresh Debian machine, once.
# Debian packages system-wide; Python tools into .tools/venv; cargo tools into
# .tools/cargo. A second run checks and returns without reinstalling.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/.tools

# The BPF compiler is named once, in .cargo/config.toml; its LLVM tools
# come in the same version.
BPF_CLANG=$(sed -n 's/^BPF_CLANG *= *"\(.*\)"$/\1/p' .cargo/config.toml)
if [[ ! $BPF_CLANG =~ ^clang-[0-9]+$ ]]; then
  echo "deps: .cargo/config.toml's BPF_CLANG (${BPF_CLANG:-none}) is not clang-N, the Debian package to install" >&2
  exit 1
fi
LLVM_VERSION=${BPF_CLANG#clang-}

APT_PACKAGES=(
  "$BPF_CLANG" "llvm-$LLVM_VERSION" "lld-$LLVM_VERSION" libelf-dev zlib1g-dev pkg-config make
  qemu-system-x86 libcap-ng-dev libseccomp-dev busybox-static
  python3-venv graphviz bpftool stress-ng
  # a real Prometheus server and promtool for the --metrics scrape test
  # (crates/custos/tests/metrics.rs, deploy/prometheus/)
  prometheus
  # the evaluation's peers and workloads (bench/matrix/README.md)
  bpftrace auditd nginx-light redis-server redis-tools p7zip-full wrk postmark
  # a real container for the attribution test (docs/containers.md); runc
  # because crun refuses hosts with cgroup v1 controllers mounted
  podman runc
  # the fleet's tests and bench (docs/fleet.md): a real ClickHouse, and kcat
  # to look into the Kafka topic by hand
  clickhouse-server clickhouse-client kcat
  # Java and Maven for the Kafka broker (below)
  openjdk-17-jre-headless maven
  # the two-machine fleet test: a TAP device (ip), and insmod for the guest
  # kernel's NIC driver, a module (custos vm run --tap)
  iproute2 kmod
  # the GRU placement benchmark's CPU workload (bench/placement/, seed 002)
  sysbench
  # systemd-analyze verify for the service units (crates/custos/tests/units.rs)
  systemd
  # make deb: dpkg-shlibdeps for the package's Depends; man to check its
  # pages render (crates/custos/tests/package.rs)
  dpkg-dev man-db
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# virtme-ng drives QEMU and shares the host root into the guest.
VNG_VERSION=1.42
if ! "$TOOLS/venv/bin/vng" --version 2>/dev/null | grep -q "$VNG_VERSION"; then
  echo "deps: installing virtme-ng $VNG_VERSION into .tools/venv"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "virtme-ng==$VNG_VERSION"
fi

# The evaluation harness (bench/) and its tests.
if ! cmp -s bench/requirements.txt "$TOOLS/venv/.bench-requirements" 2>/dev/null; then
  echo "deps: installing the benchmark harness's Python packages into .tools/venv"
  "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check -r bench/requirements.txt
  cp bench/requirements.txt "$TOOLS/venv/.bench-requirements"
fi

# virtiofsd serves the host root to the guest (the VM kernel has no 9p).
VIRTIOFSD_VERSION=1.14.0
if ! "$TOOLS/cargo/bin/virtiofsd" --version 2>/dev/null | grep -q "${VIRTIOFSD_VERSION}"; then
  echo "deps: building virtiofsd $VIRTIOFSD_VERSION into .tools/cargo (a few minutes, once)"
  cargo install -q --locked --root "$TOOLS/cargo" virtiofsd --version "$VIRTIOFSD_VERSION"
fi
# A single-node Kafka broker (KRaft, no ZooKeeper) for the fleet's tests and
# bench (docs/fleet.md): Debian has none, so Maven fetches the broker's jars.
KAFKA_VERSION=4.4.0
if [ "$(cat "$TOOLS/kafka/.version" 2>/dev/null)" != "$KAFKA_VERSION" ]; then
  echo "deps: fetching the Kafka $KAFKA_VERSION broker's jars into .tools/kafka (Maven)"
  rm -rf "$TOOLS/kafka"
  mkdir -p "$TOOLS/kafka"
  cat >"$TOOLS/kafka/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>custos</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
  mvn -q -B -f "$TOOLS/kafka/pom.xml" -Dmaven.repo.local="$TOOLS/kafka/m2" \
    dependency:copy-dependencies -DoutputDirectory="$TOOLS/kafka/libs" -DincludeScope=runtime
  rm -rf "$TOOLS/kafka/m2"
  echo "$KAFKA_VERSION" >"$TOOLS/kafka/.version"
fi
# The fuzz smoke of make test (bench/fuzz/README.md): cargo-fuzz builds with
# a nightly toolchain (-Z sanitizer flags). rustup fetches it from its dist
# server, which this machine reaches; if a machine does not, the smoke fails
# and says that nightly is missing (a fuzz suite that did not run must not
# pass), the rest of make test is unaffected.
# (A check that cannot install: `rustup run` may install a missing toolchain.)
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly-'; then
  echo "deps: installing the nightly Rust toolchain (minimal profile) for the fuzz targets"
  if ! rustup toolchain install nightly --profile minimal; then
    echo "deps: WARNING: could not install the nightly toolchain; the fuzz smoke of make test will FAIL" >&2
  fi
fi
CARGO_FUZZ_VERSION=0.13.2
export PATH="$TOOLS/cargo/bin:$PATH"
if ! cargo fuzz --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
  echo "deps: installing cargo-fuzz $CARGO_FUZZ_VERSION into .tools/cargo"
  cargo install -q --locked --root "$TOOLS/cargo" cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
# make deb (docs/operations.md, "Installing the package").
CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION"; then
  echo "deps: installing cargo-deb $CARGO_DEB_VERSION into .tools/cargo"
  cargo install -q --locked --root "$TOOLS/cargo" cargo-deb --version "$CARGO_DEB_VERSION"
fi
echo "deps: ok"
