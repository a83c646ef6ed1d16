# The frame decoder (protocol/decoder.h) in both directions, with every typed body decoder.
hypic_fuzz_target(frame SOURCES ../fuzz/frame_fuzz.cpp DEPS hypic::protocol)
