"""The scheduling cores (pure): placement, the queue, virtual clusters and borrowing, priorities,
preemption, node liveness and GPU inventories."""
