# vtpu_add_library(NAME SOURCES ... DEPS ...): one library target per folder, exported as vtpu::NAME.
# The build-only flags (top-level CMakeLists.txt) stay out of the export: a consumer gets C++20,
# the include root and the dependencies, not vtpu's warnings or -march=native.
function(vtpu_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(vtpu_${name} ${ARG_SOURCES})
  add_library(vtpu::${name} ALIAS vtpu_${name})
  # Position-independent, so that the Python extension module (python/) can link them.
  set_target_properties(vtpu_${name} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME vtpu_${name}
                                                POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(vtpu_${name} PUBLIC vtpu_usage $<BUILD_INTERFACE:vtpu_build_flags> ${ARG_DEPS})
  install(TARGETS vtpu_${name} EXPORT vtpuTargets)
endfunction()
