# Request sequences through the server's session state machine (protocol/session.h).
hypic_fuzz_target(request_sequence SOURCES ../fuzz/request_sequence_fuzz.cpp DEPS hypic::protocol)
