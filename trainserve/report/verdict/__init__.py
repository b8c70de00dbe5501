"""The run's verdict: figures checked against each other (invariants), against physical bounds (withheld), and
VALID or INVALID with every reason. The sections below the page read its reasons; it reads no section."""
