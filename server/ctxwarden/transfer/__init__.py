"""``ctxwarden export`` and ``ctxwarden import``: one session to a file and back.

They work on the database directly (``--database-url``), like ``migrate`` and
``purge``: an export is a copy of the stored rows, decoded (native format,
:mod:`ctxwarden.transfer.native`), and an import writes them back in one
transaction, so the session builds the same model input and replays the same
past inputs. pi's session files are read and written by
:mod:`ctxwarden.transfer.pi_import` and :mod:`ctxwarden.transfer.pi_export`.
"""
