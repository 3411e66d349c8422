"""Job lists, newest first, whose cost follows the page asked for and not the history stored: the pages
(paging.py), the counts of ended jobs behind deep pages (counts.py) and where a position falls in them
(buckets.py, pure)."""
