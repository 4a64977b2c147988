"""The control plane (pause/resume, weight updates, LoRA, sleep/wake), its
gRPC servicer, and its relay across several serving processes."""
