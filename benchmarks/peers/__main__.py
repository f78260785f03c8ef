from __future__ import annotations

from benchmarks.peers.runner import main

main()
