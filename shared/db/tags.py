"""A job's tags (OpenPAI v1.8's ``PUT``/``DELETE /api/v2/jobs/{user}~{job}/tag``): a set of strings kept on
the job's own document (``tags``), found in lists by the multikey index ``(tags, created_ms, _id)``
(``GET /api/v2/jobs?tagsContain=``). The status service's rewrites ``$set`` the fields they own, so a tag
written meanwhile stays; a tag change moves no ``version``."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

Doc = dict[str, Any]
MAX_TAGS = 32  # per job: a tag is a label, not a store
MAX_TAG_CHARS = 256


class TagsFullError(Exception):
    """The job holds :data:`MAX_TAGS` tags already."""


async def add_tag(jobs: AsyncCollection[Doc], job_id: str, tag: str) -> None:
    """Add ``tag`` to the job (nothing changes if it is there; :class:`TagsFullError` if the job is full)."""
    result = await jobs.update_one({"_id": job_id, f"tags.{MAX_TAGS - 1}": {"$exists": False}},
                                   {"$addToSet": {"tags": tag}})
    if result.matched_count == 0 and await jobs.count_documents({"_id": job_id, "tags": tag}) == 0:
        raise TagsFullError(job_id)


async def delete_tag(jobs: AsyncCollection[Doc], job_id: str, tag: str) -> bool:
    """Remove ``tag`` from the job; whether it was there."""
    result = await jobs.update_one({"_id": job_id, "tags": tag}, {"$pull": {"tags": tag}})
    return result.modified_count == 1


async def tags_of(jobs: AsyncCollection[Doc], job_id: str) -> tuple[str, ...]:
    doc = await jobs.find_one({"_id": job_id}, {"tags": 1})
    return tuple(doc.get("tags", ())) if doc else ()
