"""What leaves the object: subscriber declarations, signed webhooks, Queues and the HTTP port.

A subscriber reads the space's log through a durable cursor; :mod:`webhooks` and :mod:`queues`
are the built-in subscribers, and :mod:`outbound` is the port through which any of them makes
an HTTP call. The lane that drives them is :mod:`threadline.maintenance.publication_lane`; the
log's record kinds they read live with the runtime that writes them
(:mod:`threadline.threads.records`).
"""
