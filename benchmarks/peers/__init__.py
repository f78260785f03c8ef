"""shardcat against the floor and its peers, on the same data, locally and on S3 (moto).

Run ``.venv/bin/python -m benchmarks.peers --help`` from the repository root.
Modules: :mod:`.data` (the deterministic samples), :mod:`.base` (the interface
every system implements and the storage it runs on), one module per system
(:mod:`.floor`, :mod:`.shardcat_system`, :mod:`.lance_system`,
:mod:`.wds_system`, :mod:`.litdata_system`, :mod:`.mds_system`),
:mod:`.s3` (a moto server that answers ranged GETs by seek + read and counts
the bytes it sends), :mod:`.runner` (the measures) and :mod:`.report`
(docs/BENCHMARKS.md and its plots).
"""
