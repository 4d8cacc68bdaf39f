"""`packcli.errors`: each user error's exit code and its hint on a line of its own, errors that survive a trip
to another process, and an OSError met while writing turned into the refusal it is (or left a bug)."""

from __future__ import annotations

import errno
import pickle
import signal

import pytest

from packcli.errors import (
    BudgetError,
    ContractError,
    InputError,
    Interrupted,
    PackcliError,
    PathError,
    RecordError,
    SystemRefusal,
    WorkerError,
    refusal,
    unusable_path,
)


@pytest.mark.parametrize(("kind", "code"), [(InputError, 2), (PathError, 2), (BudgetError, 1), (WorkerError, 1),
                                            (SystemRefusal, 1), (ContractError, 1)])
def test_usage_errors_exit_2_and_what_went_wrong_after_work_started_exits_1(kind, code):
    error = kind("what happened", "what to do")
    assert error.exit_code == code and isinstance(error, PackcliError)
    assert str(error) == "what happened\n  hint: what to do"
    assert str(kind("what happened")) == "what happened"


def test_a_record_error_names_file_and_line_and_crosses_a_process_whole():
    error = RecordError("a.jsonl", 7, "role 'wizard'")
    assert error.exit_code == 1 and error.message == "a.jsonl:7: role 'wizard'" and "on_error='skip'" in error.hint
    again = pickle.loads(pickle.dumps(error))  # how a worker's error reaches the driver
    assert (again.source, again.line, again.reason, str(again)) == ("a.jsonl", 7, "role 'wizard'", str(error))
    hinted = pickle.loads(pickle.dumps(InputError("gone", "look elsewhere")))
    assert (hinted.message, hinted.hint) == ("gone", "look elsewhere")


def test_a_full_disk_is_a_refusal_naming_where_and_anything_else_stays_a_bug():
    full = refusal(OSError(errno.ENOSPC, "No space left on device", "/out/shard-00001.parquet"), "writing --out")
    assert isinstance(full, SystemRefusal)
    assert full.message == ("writing --out: no space left on the device (/out/shard-00001.parquet); nothing was "
                            "written there")
    assert refusal(OSError(errno.ENOENT, "No such file"), "writing") is None  # not the machine saying no
    assert refusal(ValueError("no"), "writing") is None


def test_an_unusable_path_names_the_option_and_what_to_do():
    denied = unusable_path(PermissionError(errno.EACCES, "Permission denied", "/root/out"), "--out /root/out")
    assert isinstance(denied, PathError) and denied.message == "--out /root/out: permission denied"
    assert denied.hint == "no permission there; choose a place you can write to"
    deeper = unusable_path(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/srv/file"), "--out file/y")
    assert deeper.message == "--out file/y: not a directory (/srv/file)"  # the path the system names, when new
    assert isinstance(unusable_path(OSError(errno.EDQUOT, "Disk quota exceeded"), "--out o"), SystemRefusal)


def test_an_interrupt_keeps_its_signal_and_what_is_on_disk():
    stop = Interrupted(signal.SIGTERM, kept="the previous artifact")
    assert isinstance(stop, KeyboardInterrupt) and (stop.signum, stop.kept) == (signal.SIGTERM, "the previous artifact")
    assert Interrupted().signum == signal.SIGINT
