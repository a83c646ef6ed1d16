# The PREFILL reply with entries (protocol/messages.h DecodePrefillEntriesReply): what a router
# daemon reads back from a peer before it verifies the entries.
hypic_fuzz_target(prefill_entries SOURCES ../fuzz/prefill_entries_fuzz.cpp DEPS hypic::protocol)
