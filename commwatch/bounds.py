"""Bounds of a sane JSON message (wire contract v1), shared by the field checks of
`messages` and the typed decoders of `message_schema`; the call record's are in `wire`."""

MAX_JOB_LEN = 256  # a job id: 1-256 characters, no control character, no '/' (it ends at the key's '/')
MAX_NAME_LEN = 256  # node names, GPU ids, incident ids, map keys
MAX_ITEMS = 4096  # entries of a map (phases, coords, ib devices) or of a p2p list
MAX_PHASE_MS = 1e9  # a phase of one iteration longer than 11 days is not a measurement
MAX_READING = 1e18  # any hardware reading (bytes, counters, watts, MHz)
MAX_INT = 2**63 - 1
JOB_CHARS = r"[^\x00-\x1f\x7f/]{1,%d}" % MAX_JOB_LEN
NAME_CHARS = r"[^\x00-\x1f\x7f]{0,%d}" % MAX_NAME_LEN
HEX16 = r"[0-9a-f]{16}"
