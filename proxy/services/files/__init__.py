"""Uploaded files: the Files API (`files.py`, over store/objects/files.py's `BlobStore`), and the
text of one of a key's files for whoever reads it (`Files.text_of`: input_file parts, whose
resolution lives with the Responses request in services/responses/inputs.py)."""
