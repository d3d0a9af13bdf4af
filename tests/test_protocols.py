"""paperlib.harness.protocols: one name per protocol, and a record named by its own parameters."""

import pytest

from paperlib.harness import presets, protocols


def _params(**overrides) -> dict:
    """A record's params.json as the runner writes it: the resolved configuration."""
    return presets.resolve_config(**overrides).to_dict()


def test_each_preset_has_one_name_and_a_definition():
    assert protocols.protocol_name("cpu2", "cifar10") == "CPU protocol"
    assert protocols.protocol_name("cpu", "cifar10") == "pilot protocol"
    assert protocols.protocol_name("cpu", "mnist") == "short protocol"
    assert protocols.protocol_name("paper", "tinyimagenet") == "paper protocol"
    assert set(protocols.NAMES.values()) == set(protocols.DEFINITIONS)
    assert protocols.long_name("gpu", "cifar10").startswith("GPU protocol (")
    with pytest.raises(KeyError, match="no protocol name"):
        protocols.protocol_name("nightly", "mnist")


def test_a_record_is_named_by_the_protocol_its_parameters_define():
    assert protocols.record_protocol(_params(dataset="cifar10", preset="cpu2", grouping="layer", target=0.5)) \
        == "CPU protocol"
    # a run of the cpu preset at the CPU protocol's gates' learning rate is that protocol's run
    free = _params(dataset="cifar10", preset="cpu", target=1.0, gates_lr=presets.CPU2_GATES_LR)
    assert protocols.record_preset(free) == "cpu2" and protocols.record_protocol(free) == "CPU protocol"
    # at another rate it stays its own preset's, with what it changes said by the index (variant)
    assert protocols.record_protocol(_params(dataset="cifar10", preset="cpu", target=1.0, gates_lr=3.0)) \
        == "pilot protocol"


def test_a_record_made_before_its_preset_changed_is_of_superseded_settings(monkeypatch):
    record = _params(dataset="mnist", preset="paper", model="mlp", target=0.5)
    assert protocols.record_protocol(record) == "paper protocol"
    changed = dict(presets.PAPER[("mnist", "mlp")], dual_lr=5e-4)
    monkeypatch.setitem(presets.PAPER, ("mnist", "mlp"), changed)
    assert protocols.record_protocol(record) == "paper protocol, superseded settings"
    assert protocols.record_protocol(_params(dataset="mnist", preset="paper", model="mlp", target=0.5)) \
        == "paper protocol"  # a run made at the new value is today's
