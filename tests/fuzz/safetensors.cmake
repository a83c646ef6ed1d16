# The safetensors header parser and the index parser (core/safetensors.h) on arbitrary bytes.
hypic_fuzz_target(safetensors SOURCES ../fuzz/safetensors_fuzz.cpp DEPS hypic::core)
