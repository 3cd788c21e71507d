"""Which backend a ``configs/passm.py`` run trains on: shared memory, a parameter server, or sync.

Example::

    import ml_collections
    from trainers.passm.backend import resolve_backend

    # configs/passm.py's defaults: backend "auto", strategy "parameter_server", no cluster_spec.
    config = ml_collections.ConfigDict(
        dict(backend="auto", strategy="parameter_server", mode="passm_plus", cluster_spec="")
    )  # the flat view (trainers.passm.config.flat_view) of a config; a run config works too
    assert resolve_backend(config) == "shared_memory"  # one host: c threads over one model
    config.cluster_spec = '{"worker": ["h1:2222"], "ps": ["h2:2222"], "chief": ["h0:2222"]}'
    assert resolve_backend(config) == "parameter_server"  # several hosts

``config.passm.backend``:

- ``"auto"`` (the default): ``"parameter_server"`` when ``passm.cluster_spec`` names a cluster
  (several hosts), otherwise ``"shared_memory"`` (one host, the paper's regime);
- ``"shared_memory"``: c worker threads in this process over one model (`trainers.passm`);
- ``"parameter_server"``: a ``ParameterServerStrategy`` cluster, loopback when ``cluster_spec``
  is empty (`trainers.passm.parameter_server.AsyncPartitionedTrainer`).

``config.strategy`` keeps its meaning: ``"parameter_server"`` (the config's default) trains
asynchronously on the backend above; ``"default"`` / ``"mirrored"`` train synchronously
(``passm.mode="sync"``, or a logged fall-back for the asynchronous modes), as does any
non-parameter-server strategy passed in. ``"synchronous"`` is returned for those runs.
"""

from __future__ import annotations

import tensorflow as tf

from trainers.passm import config as passm_config

BACKENDS = ("auto", "shared_memory", "parameter_server")
SYNCHRONOUS = "synchronous"
# config.strategy values under which an explicit backend="shared_memory" may run.
_SHARED_MEMORY_STRATEGIES = ("parameter_server", "default")


def resolve_backend(config, strategy: tf.distribute.Strategy | None = None) -> str:
    """``"shared_memory"``, ``"parameter_server"`` or ``"synchronous"`` for ``config``.

    Args:
      config: a ``configs/passm.py`` config (``backend`` missing means ``"auto"``).
      strategy: a strategy the caller built, or None to follow ``config.strategy``.

    Raises:
      ValueError: an unknown backend, or a backend that contradicts the strategy or the
        cluster (the message names both and what to change).
    """
    config = passm_config.flat_view(config)
    backend = config.get("backend", "auto")
    if backend not in BACKENDS:
        raise ValueError(
            f"config.passm.backend must be one of {BACKENDS}, got {backend!r}; 'shared_memory' "
            "runs c worker threads over one model on this host, 'parameter_server' a "
            "tf.distribute cluster (several hosts), 'auto' picks by config.passm.cluster_spec."
        )
    if strategy is not None:
        return _with_strategy(backend, strategy)
    if backend == "parameter_server":
        if config.strategy != "parameter_server":
            raise ValueError(
                "config.passm.backend='parameter_server' needs "
                f"config.strategy='parameter_server', got {config.strategy!r}; drop one of the "
                "two overrides."
            )
        return backend
    if backend == "shared_memory":
        if config.get("cluster_spec"):
            raise ValueError(
                "config.passm.backend='shared_memory' trains on this host, but "
                "config.passm.cluster_spec names a cluster; drop --config.passm.cluster_spec, or "
                "use --config.passm.backend=parameter_server to train on that cluster."
            )
        if config.strategy not in _SHARED_MEMORY_STRATEGIES:
            raise ValueError(
                f"config.passm.backend='shared_memory' runs its own worker threads, not "
                f"config.strategy={config.strategy!r}; use --config.strategy=parameter_server "
                f"(asynchronous) or --config.passm.backend=auto with {config.strategy!r} "
                "(synchronous SGD)."
            )
        return SYNCHRONOUS if config.mode == "sync" else backend
    if config.strategy != "parameter_server" or config.mode == "sync":
        return SYNCHRONOUS
    return "parameter_server" if config.get("cluster_spec") else "shared_memory"


def _with_strategy(backend: str, strategy: tf.distribute.Strategy) -> str:
    is_ps = isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)
    if backend == "shared_memory":
        raise ValueError(
            f"config.passm.backend='shared_memory' runs its own worker threads and takes no "
            f"tf.distribute strategy, got {type(strategy).__name__}; pass strategy=None, or "
            "config.passm.backend='parameter_server' with a ParameterServerStrategy."
        )
    if backend == "parameter_server" and not is_ps:
        raise ValueError(
            f"config.passm.backend='parameter_server' needs a ParameterServerStrategy, got "
            f"{type(strategy).__name__}; pass strategy=None to start a loopback cluster, or "
            "config.passm.backend='auto'."
        )
    return "parameter_server" if is_ps else SYNCHRONOUS
