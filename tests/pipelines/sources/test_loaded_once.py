"""sources.loaded_once: a run's pipelines share one loaded source; outside it, nothing is kept."""

import numpy as np

import pipelines
from pipelines import sources


def _config(num_train=64):
    config = pipelines.default_data_config()
    config.source, config.batch_size, config.augment = "arrays", 8, "none"
    rng = np.random.default_rng(0)
    config.train_arrays = {
        "inputs": rng.normal(size=(num_train, 4)).astype(np.float32),
        "label": np.arange(num_train) % 3,
    }
    config.eval_arrays = {
        "inputs": rng.normal(size=(16, 4)).astype(np.float32),
        "label": np.zeros(16, np.int64),
    }
    return pipelines.resolve_data_config(config)


def test_a_source_is_loaded_once_per_scope_whatever_the_pipeline_stages(monkeypatch):
    loads = []
    loader = sources._LOADERS["arrays"]
    monkeypatch.setitem(sources._LOADERS, "arrays", lambda c: loads.append(1) or loader(c))
    config = _config()
    with sources.loaded_once():
        first = sources.load(config)
        staged = _config()
        staged.train_arrays, staged.eval_arrays = config.train_arrays, config.eval_arrays
        staged.augment, staged.batch_size, staged.echo = "none", 4, 2.0  # stages, not data
        assert sources.load(staged) is first
        with sources.loaded_once():  # nested: the same scope
            assert sources.load(config) is first
        other = _config(num_train=32)  # other data: loaded on its own
        assert sources.load(other) is not first
        batches = [pipelines.make_datasets(config, seed=0).train for _ in range(3)]
        assert all(b.element_spec == batches[0].element_spec for b in batches)
    assert len(loads) == 2
    assert sources.load(config) is not first  # outside: nothing kept
    assert len(loads) == 3


def test_a_second_run_that_loses_the_race_to_generate_mnist1d_reads_the_winners_copy(
    tmp_path, monkeypatch
):
    from pipelines.sources import mnist1d

    prepare = mnist1d.Mnist1d.download_and_prepare

    def other_run_wins(self, *args, **kwargs):
        prepare(self, *args, **kwargs)  # the other run stores the data...
        # ...and TFDS then refuses to move this run's copy over it.
        raise FileExistsError(f"Cannot rename ... Destination {self.data_dir} already exists.")

    monkeypatch.setattr(mnist1d.Mnist1d, "download_and_prepare", other_run_wins)
    source = mnist1d.load(40, 10, str(tmp_path))
    assert source.train.num_examples == 40
    assert len(list(source.train.dataset)) == 40 and len(list(source.eval.dataset)) == 10
