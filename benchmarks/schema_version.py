"""The result document's schema version, apart from both sides that need it.

`benchmarks.result` (the writer, which must import without pydantic) and
`benchmarks.result_schema` (the reader's typed schema) both read it; keeping it here lets the
writer import the schema lazily and the schema never import the writer: no import circle.
Bump it on any incompatible change to the document; readers refuse versions they do not know.
"""

RESULT_SCHEMA_VERSION = 1
