# hypicctl warm's JSONL reader (tools/hypicctl/token_lines.h).
hypic_fuzz_target(ctl_token_lines SOURCES ctl_token_lines_fuzz.cpp DEPS hypic::ctl)
