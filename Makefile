# The two commands a fresh machine needs: `make demo` and `make test`.
# Both install what they need first (scripts/deps.sh, idempotent).

CARGO ?= cargo
CUSTOS := target/release/custos
export BPF_CLANG ?= clang-19
export PATH := $(CURDIR)/.tools/cargo/bin:$(CURDIR)/.tools/venv/bin:$(PATH)

.PHONY: all deps build kernel demo test clean

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

test: kernel
	$(CARGO) test --release --workspace
	.tools/venv/bin/python -m pytest -q bench/harness/tests

clean:
	$(CARGO) clean
