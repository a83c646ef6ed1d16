# The entry parser (storage/entry_format.h): bytes from a PUT body or an SSD read.
hypic_fuzz_target(entry SOURCES ../fuzz/entry_fuzz.cpp DEPS hypic::storage)
