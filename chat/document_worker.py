"""The background worker that processes uploaded documents queued in Postgres
(core/document_store.py's jobs): a `QueueWorker` (chat/queue_worker.py) whose job is one
document through rag/document_ingest.py.

A file that cannot be read fails with the reason for the user (encrypted, no text, not what its
name says); a cancel stops the work; anything else (the database, the embedder) is retried a
few times, then fails the document saying so.
"""

from __future__ import annotations

import logging

from chat.queue_worker import QueueWorker
from core import document_store
from core.logs import first_line
from core.services import Services
from rag.document_convert import DocumentRejected
from rag.document_ingest import Cancelled, ingest_document


class DocumentWorker(QueueWorker):
    name = "document"
    log = logging.getLogger("resolveai.documents")

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services

    async def run_one(self) -> bool:
        pool = self.services.database.pool
        job = await document_store.claim_job(pool)
        if job is None:
            return False
        document_id, name = job["document_id"], job["filename"]
        self.log.info("Documents: processing %r (%d KB)", name, len(job["content"]) // 1024)
        try:
            result = await ingest_document(
                pool, self.services.embedder, document_id, name, job["content"]
            )
        except DocumentRejected as error:
            await document_store.fail_document(pool, document_id, str(error))
            self.log.info("Documents: %r refused: %s", name, error)
        except Cancelled:
            self.log.info("Documents: %r cancelled", name)
        except Exception as error:
            reason = f"{type(error).__name__}: {first_line(error)}"
            retry = await document_store.retry_later(pool, document_id, job["attempts"], reason)
            self.log.warning("Documents: %r failed (%s); %s", name, reason,
                             "will retry" if retry else "giving up")  # fmt: skip
        else:
            pages = f"{result.pages} pages, " if result.pages else ""
            self.log.info("Documents: %r ready (%s%d chunks, %.1f s)", name, pages, result.chunks,
                          result.seconds)  # fmt: skip
        return True
