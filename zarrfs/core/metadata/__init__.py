"""Zarr metadata documents of every format mapped into one frozen model (see ``model``)."""

from zarrfs.core.metadata.model import (
    ArrayMetadata,
    DocumentFormat,
    GroupMetadata,
    check_attributes,
    check_node_name,
    document_format,
    load_json_object,
    register_document_format,
)
from zarrfs.core.metadata.v3 import (
    array_metadata_v3,
    group_metadata_v3,
    new_array_v3,
    new_group_v3,
    parse_v3,
)

__all__ = [
    "ArrayMetadata",
    "DocumentFormat",
    "GroupMetadata",
    "array_metadata_v3",
    "check_attributes",
    "check_node_name",
    "document_format",
    "group_metadata_v3",
    "load_json_object",
    "new_array_v3",
    "new_group_v3",
    "parse_v3",
    "register_document_format",
]
