"""Notifications, the pure core: who is told what about a job (:mod:`.decide`), the message
(:mod:`.render`), when a failed delivery is tried again and when a recipient's messages become a digest
(:mod:`.schedule`), the job's own switch (:mod:`.kinds`), subscriptions (:mod:`.subscriptions`) and the
webhook's signature and its sealed key (:mod:`.signing`). No I/O: services/notify is the shell."""
