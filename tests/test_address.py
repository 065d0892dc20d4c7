"""The one parser of a config's checkpoint address, and the gate's one error builder."""

from __future__ import annotations

from checkpoint_guard import CheckpointModeMismatchError
from checkpoint_guard._address import Address, mode_mismatch, thread_config


def test_defaults_and_normalisation() -> None:
    assert tuple(Address.from_config(None)) == (None, "", None)
    assert tuple(Address.from_config({})) == (None, "", None)
    got = Address.from_config({"configurable": {"thread_id": "t", "checkpoint_ns": None}})
    assert tuple(got) == ("t", "", None)
    full = Address.from_config(
        {"configurable": {"thread_id": "t", "checkpoint_ns": "n", "checkpoint_id": "c"}}
    )
    assert tuple(full) == ("t", "n", "c")


def test_configs_round_trip() -> None:
    address = Address("t", "n", "c")
    assert Address.from_config(address.config()) == address
    assert address.thread_config() == {"configurable": {"thread_id": "t", "checkpoint_ns": "n"}}
    # a put's config names a root's parent as None: the key is there
    assert Address("t").config()["configurable"] == {
        "thread_id": "t",
        "checkpoint_ns": "",
        "checkpoint_id": None,
    }
    assert thread_config("t") == {"configurable": {"thread_id": "t"}}


def test_mode_mismatch_names_the_checkpoint() -> None:
    err = mode_mismatch(Address("t", "n", "c").config(), action="write onto")
    assert isinstance(err, CheckpointModeMismatchError)
    assert (err.thread_id, err.checkpoint_ns, err.checkpoint_id) == ("t", "n", "c")
    assert (err.mode, err.found) == ("full", "delta")
    assert str(err).startswith("refusing to write onto thread 't'")
