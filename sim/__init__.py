"""A deterministic simulator of the whole chain (docs/RELIABILITY.md, "The simulator").

It runs the product's real engine (the pure core, `JobChanges`, `TaskRunner`, the
deliveries, the in-memory store's and queue's logic) over simulated ports: one clock,
a store whose commits fail, conflict, crash or stall at every commit boundary, a queue
with Cloud Tasks' semantics and worse, targets that answer in every way, processes
that die and stall, and an operator acting at random moments. Every random choice
comes from one `random.Random(seed)`, so a seed replays byte for byte; the invariants
(`invariants.py`) are checked after every step.

- `clock.py`: the one simulated clock (wall and monotonic).
- `ports.py`: the faulty store, the worse queue and the simulated target.
- `invariants.py`: what must hold after every step, and at the end.
- `world.py`: the jobs, the processes and the operator.
- `simulation.py`: the loop of steps, its trace digest and its result.
- `variants.py`: deliberately broken engines the simulator must catch.
- `shrink.py`: a failing run shrunk to the smallest one found that fails alike.
- `replay.py`: a run's settings as `python -m sim` flags, and back.
- `__main__.py`: `python -m sim` (a seed, or random seeds for N seconds).
"""
