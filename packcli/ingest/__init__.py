"""Reading inputs: records and where they come from."""

from packcli.ingest.records import *  # noqa: F401,F403
from packcli.ingest.records import (  # noqa: F401 - the names callers import from packcli.ingest
    InputFile,
    Kind,
    Message,
    Record,
    Rejection,
    describe_input,
    expand_inputs,
    open_binary,
    parse_record,
    read_errors,
    read_lines,
)
