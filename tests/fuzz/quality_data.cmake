# hypic-bench quality's JSONL data reader (tools/hypic-bench/quality_data.h).
hypic_fuzz_target(quality_data SOURCES quality_data_fuzz.cpp DEPS hypic::bench_quality_data)
