# torch_peer_test.mk: dev/train_gpt2_torch.py, the PyTorch peer, against train_cpu (test/test_torch_peer.sh).
# Included by the main Makefile, which defines the target train_cpu.
#   make test_torch_peer   float32 on the CPU: the peer's losses, norms and weights = train_cpu's within the
#                          float32 bounds of test/compare_runs.py (about 30 s; skipped when $(PYTHON) cannot
#                          import torch: make clients_deps installs it and torchao, which adds its float8 run)
# This fragment leaves the including Makefile's default goal as it was.
_torch_peer_test_saved_goal := $(.DEFAULT_GOAL)

PYTHON ?= python3

.PHONY: test_torch_peer
test_torch_peer: train_cpu python_deps test/test_torch_peer.sh dev/train_gpt2_torch.py
	PYTHON=$(PYTHON) bash test/test_torch_peer.sh

.DEFAULT_GOAL := $(_torch_peer_test_saved_goal)
