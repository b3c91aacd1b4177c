# One target per habit. Every target installs what it needs first, so each works on a fresh clone.
SHELL := /bin/bash
export SAM_CLI_TELEMETRY := 0
.DEFAULT_GOAL := help

VENV   := .venv
TOOLS  := .tools
# ParallelCluster's own schema, for tests/pcluster (aws-parallelcluster pulls aws-cdk 1.x: own venv).
PCLUSTER_VENV := .venv-pcluster
# The local head node's aws CLI (awscli 1.x vendors an older botocore than the main venv pins: own venv).
AWSCLI_VENV := .venv-awscli
BIN    := $(VENV)/bin
SAM    := $(TOOLS)/bin/sam
SAM_VERSION := 1.170.0

# Python 3.12 is the Lambda runtime; build with the same minor version when the machine has it.
PYTHON ?= $(shell for p in $$HOME/.pyenv/versions/3.12.1/bin/python3.12 python3.12; do \
            command -v $$p >/dev/null 2>&1 && { command -v $$p; break; }; done)
ifeq ($(strip $(PYTHON)),)
PYTHON := python3
$(warning Python 3.12 not found; falling back to $(shell python3 --version 2>&1). The Lambda runtime is 3.12.)
endif

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml setup.py layers/common/requirements.txt requirements-cli.txt requirements-local.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

$(PCLUSTER_VENV)/bin/.installed: requirements-pcluster.txt pyproject.toml
	$(PYTHON) -m venv $(PCLUSTER_VENV)
	$(PCLUSTER_VENV)/bin/pip install --quiet --upgrade pip
	$(PCLUSTER_VENV)/bin/pip install --quiet -r requirements-pcluster.txt
	$(PCLUSTER_VENV)/bin/pip install --quiet --no-deps -e .
	touch $@

$(AWSCLI_VENV)/bin/.installed: requirements-awscli.txt
	$(PYTHON) -m venv $(AWSCLI_VENV)
	$(AWSCLI_VENV)/bin/pip install --quiet --upgrade pip
	$(AWSCLI_VENV)/bin/pip install --quiet -r requirements-awscli.txt
	touch $@

# The local head node (trainrun.local.slurm_head_node) runs a real Slurm and MUNGE: the distribution's
# packages, installed once with apt-get (as root, or through sudo). Quiet when they are there.
SLURM_COMMANDS := slurmctld slurmd munged sbatch srun squeue scontrol sinfo
.PHONY: slurm
slurm: ## Install Slurm and MUNGE for the local head node (apt-get, when missing)
	@missing=""; \
	for c in $(SLURM_COMMANDS); do \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; \
	done; \
	[ -z "$$missing" ] && exit 0; \
	echo "make slurm: installing slurm-wlm and munge for the local head node (missing:$$missing)"; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make slurm: no apt-get on this machine: install Slurm (slurmctld, slurmd, srun, ...) and MUNGE with its package manager" >&2; \
	  exit 1; \
	fi; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	else echo "make slurm: apt-get needs root, and there is no sudo: run 'apt-get install slurm-wlm munge' as root" >&2; exit 1; fi; \
	log=$$(mktemp); \
	if ! { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	       $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge; } >"$$log" 2>&1; then \
	  cat "$$log" >&2; rm -f "$$log"; \
	  echo "make slurm: apt-get could not install slurm-wlm and munge (output above)" >&2; \
	  exit 1; \
	fi; \
	rm -f "$$log"; \
	for c in $(SLURM_COMMANDS); do \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$c >/dev/null 2>&1 || { echo "make slurm: $$c still missing after apt-get install" >&2; exit 1; }; \
	done; \
	echo "make slurm: Slurm and MUNGE installed"

# shellcheck checks every shell script we ship (trainrun/scripts/*.sh, the local head node's
# stand-ins) and every script trainrun renders (tools/shellcheck_rendered.py). The distribution's
# package, installed once with apt-get like Slurm above; quiet when it is there.
.PHONY: shellcheck
shellcheck: ## Install shellcheck (apt-get, when missing)
	@command -v shellcheck >/dev/null 2>&1 && exit 0; \
	echo "make shellcheck: installing shellcheck"; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make shellcheck: no apt-get on this machine: install shellcheck with its package manager" >&2; exit 1; \
	fi; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	else echo "make shellcheck: apt-get needs root, and there is no sudo: run 'apt-get install shellcheck' as root" >&2; exit 1; fi; \
	log=$$(mktemp); \
	if ! { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	       $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends shellcheck; } >"$$log" 2>&1; then \
	  cat "$$log" >&2; rm -f "$$log"; echo "make shellcheck: apt-get could not install shellcheck (output above)" >&2; exit 1; \
	fi; \
	rm -f "$$log"; \
	command -v shellcheck >/dev/null 2>&1 || { echo "make shellcheck: shellcheck still missing after apt-get install" >&2; exit 1; }

# The shipped .sh files and every executable stand-in script; then every script trainrun renders
# (the head node's scripts for each example run file and its variants, hostile values included;
# the Neuron install script per OS; the local head node's stand-ins), from this checkout's
# trainrun whichever checkout the virtualenv was installed from.
SHELL_SCRIPTS = $(shell git ls-files '*.sh') $(shell grep -lE '^\#!/bin/(ba)?sh|^\#!/usr/bin/env (ba)?sh' $$(git ls-files examples/local-head-node))

.PHONY: lint-shell
lint-shell: venv shellcheck ## shellcheck the shell scripts we ship, and every script trainrun renders
	shellcheck $(SHELL_SCRIPTS)
	PYTHONPATH=layers/common $(BIN)/python -m tools.shellcheck_rendered

$(SAM):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet aws-sam-cli==$(SAM_VERSION)

.PHONY: venv
venv: $(BIN)/.installed ## Create the virtualenv with every pinned dependency

.PHONY: demo
demo: venv $(AWSCLI_VENV)/bin/.installed slurm ## Run a whole training run locally, no AWS account needed
	$(BIN)/trainrun local examples/single-node.yaml

.PHONY: demo-eks
demo-eks: venv $(AWSCLI_VENV)/bin/.installed ## The same run on Amazon EKS (cluster.kind: eks), locally
	$(BIN)/trainrun local examples/single-node-eks.yaml

.PHONY: test
# A whole test module per worker (a module's tests may share one deployed stack or recorded run,
# and some run in order), handed out longest first in the order tests/conftest.py sets. More
# workers than cores: the modules that mostly wait on the real clock (a capacity block's start,
# keep_for, the AWS clock) leave the cores to the others meanwhile. The tests that add and delete
# this machine's users run after, alone (tests/conftest.py says why).
TEST_WORKERS ?= 6

test: venv $(PCLUSTER_VENV)/bin/.installed $(AWSCLI_VENV)/bin/.installed slurm shellcheck ## Run every test: unit, integration, end-to-end, ParallelCluster schema
	$(BIN)/pytest --ignore=tests/pcluster -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow and not alone"
	$(BIN)/pytest --ignore=tests/pcluster -m alone
	$(PCLUSTER_VENV)/bin/pytest tests/pcluster

.PHONY: lint
lint: venv $(SAM) lint-shell ## ruff, mypy, cfn-lint, sam validate --lint and shellcheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	# With the informational checks: I3011 wants every stateful resource to say what deleting the stack does to it.
	$(BIN)/cfn-lint --include-checks I -- template.yaml
	$(SAM) validate --lint --region us-west-2

.PHONY: build
build: venv $(SAM) ## sam build (arm64 wheels for the layer)
	# sam looks for python3.12 on PATH to build the python3.12 layer; the venv has it.
	PATH="$(abspath $(BIN)):$$PATH" $(SAM) build --region us-west-2

.PHONY: load-test
load-test: venv $(AWSCLI_VENV)/bin/.installed slurm ## Load test: 10 concurrent runs on trainrun serve, to the end; prints the time
	$(BIN)/pytest tests/e2e/test_serve.py -m slow -s -q --timeout=3600

.PHONY: bench
bench: venv ## Benchmarks: handler cold-import time, job log parsing, AWS calls per log batch, the examples on the AWS clock
	$(BIN)/python bench/bench_cold_import.py
	$(BIN)/python bench/bench_joblog.py
	$(BIN)/python bench/bench_progress.py
	$(BIN)/python bench/bench_aws_clock.py
	$(BIN)/python bench/bench_kubernetes_client.py

.PHONY: iam-report
iam-report: venv ## What the recorded local runs' calls used, and every granted but unused IAM statement
	$(BIN)/python -m trainrun.local.iam.report

.PHONY: deployer-policy
deployer-policy: venv ## The IAM policies a deployer needs for sam deploy/delete of this stack (into build/deployer/)
	$(BIN)/python -m tools.deployer_policy --out build/deployer $(if $(STACK),--stack $(STACK)) $(if $(REGION),--region $(REGION)) $(if $(ACCOUNT),--account $(ACCOUNT))

.PHONY: check
check: lint test build ## Everything CI runs

.PHONY: clean
clean: ## Remove the virtualenvs and build output
	rm -rf $(VENV) $(TOOLS) $(PCLUSTER_VENV) $(AWSCLI_VENV) .aws-sam .pytest_cache .mypy_cache .ruff_cache
