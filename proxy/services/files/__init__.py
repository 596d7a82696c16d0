"""Uploaded files: the Files API (`files.py`, over store/files.py's `BlobStore`) and the text of
a request's `input_file` parts (`inputs.py`: file ids, URLs, inline data)."""
