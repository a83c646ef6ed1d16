# The config.json parser of gpu/model (config.h): a model directory is untrusted input.
hypic_fuzz_target(model_config SOURCES ../fuzz/model_config_fuzz.cpp DEPS hypic::gpu_model)
