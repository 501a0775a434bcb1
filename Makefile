# The two commands a fresh machine needs: `make demo` and `make test`.
# Both install what they need first (scripts/deps.sh, idempotent).

CARGO ?= cargo
CUSTOS := target/release/custos
export PATH := $(CURDIR)/.tools/cargo/bin:$(CURDIR)/.tools/venv/bin:$(PATH)

.PHONY: all deps build kernel demo test lint clean fuzz fuzz-smoke deb package

all: build

deps:
	@scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace

# A sched_ext kernel for the VM: newest from Debian, else the cached or shared one.
kernel: build
	@$(CUSTOS) vm kernel >/dev/null

demo: kernel
	@scripts/demo.sh

# The gates first: they fail in seconds, not after the 45 minutes of tests.
lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

# Every suite runs and reports its failures even when an earlier one failed
# (a failure in one crate must not hide another's); make still exits non-zero.
# scripts/test.sh runs the custos crate's VM suites beside the rest (QEMU
# emulates on one thread; the second core would idle).
test: lint kernel
	@scripts/test.sh

# Fuzzing of the hand-written readers (fuzz/, bench/fuzz/README.md): each
# target for FUZZ_SECONDS on the nightly toolchain. `make test` runs the
# 30-second smoke (scripts/test.sh).
# New inputs go to a scratch corpus under fuzz/target (the committed seeds
# in fuzz/corpus are read, not grown); crashes land in fuzz/artifacts.
FUZZ_SECONDS ?= 60
# The build (nightly, ASan) lives outside the checkout, like the VM kernel's
# cache: a fresh checkout (CI's) reuses it instead of a cold 13-minute build.
FUZZ_TARGET_DIR ?= $(HOME)/.cache/custos/fuzz-target
FUZZ_TARGETS := line_parsers verify rawseg
# Every target runs even when an earlier one crashed; the exit status says
# whether any did.
fuzz: deps
	cd fuzz && rc=0; for t in $(FUZZ_TARGETS); do \
		mkdir -p target/corpus/$$t && \
		$(CARGO) +nightly fuzz run --release --debug-assertions --target-dir $(FUZZ_TARGET_DIR) $$t target/corpus/$$t corpus/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
			|| { echo "fuzz: target $$t FAILED"; rc=1; }; \
	done; exit $$rc

fuzz-smoke:
	$(MAKE) fuzz FUZZ_SECONDS=30

# The Debian package (docs/operations.md, "Installing the package"); its
# contents are crates/custos/Cargo.toml's [package.metadata.deb].
deb: build
	@$(MAKE) --no-print-directory package

# The same from the release binary already built (crates/custos/tests/package.rs
# runs this): the man pages and completions it writes from its own clap
# definition (gzipped, as Debian ships man pages), then cargo-deb.
# --strip: the profile's debug info (debug = 1) is 9/10 of the binary.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
DEB_DOCS := $(TARGET_DIR)/release/docs
DEB_OUT ?= $(TARGET_DIR)/debian
package:
	rm -rf $(DEB_DOCS)
	$(TARGET_DIR)/release/custos generate-docs $(DEB_DOCS)
	gzip -9n $(DEB_DOCS)/man/*.1
	mkdir -p $(DEB_OUT)
	$(CARGO) deb -p custos --no-build --strip -o $(DEB_OUT)

clean:
	$(CARGO) clean
