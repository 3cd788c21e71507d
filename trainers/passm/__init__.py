"""The asynchronous partitioned trainer's shared-memory backend (one host, the default).

Example::

    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/passm

    from trainers.passm import SharedMemoryTrainer
    trainer = SharedMemoryTrainer(model_fn, num_workers=4)  # see trainers.passm.shared_memory

Modules: `shared_memory` (the trainer: c worker threads over one model), `steps` (one worker's
compiled ASSM/PASSM steps), `staleness` (model-wide staleness and the concurrent-writer probe),
`backend` (which backend a ``configs/passm.py`` config runs on). The parameter-server backend
(several hosts) is `trainers.passm.parameter_server.AsyncPartitionedTrainer`; both share the block
partition (`trainers.passm.blocks`), the schedule (`trainers.passm.schedule`) and the update
rule (`trainers.passm.state.TrainingState.apply`).
"""

from trainers.passm.backend import BACKENDS, resolve_backend
from trainers.passm.shared_memory import SharedMemoryTrainer
from trainers.passm.staleness import UpdateMeter

__all__ = ["BACKENDS", "SharedMemoryTrainer", "UpdateMeter", "resolve_backend"]
