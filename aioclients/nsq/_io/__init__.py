"""asyncio drivers: one per nsqd connection, and the nsqlookupd poller."""
