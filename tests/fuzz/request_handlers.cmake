# Request sequences against a real Handlers instance (model "none", a host RAM tier): HELLO,
# then arbitrary frames, as a Session feeds them (server/handlers.h).
hypic_fuzz_target(request_handlers SOURCES ../fuzz/request_handlers_fuzz.cpp DEPS hypic::server)
