# vipl_add_provider(name): builds src/providers/<name>/ into libvipl.
# The provider's folder defines an OBJECT library vipl_prov_<name> and a
# `const struct vipl_provider vipl_provider_<name>` ops table.
function(vipl_add_provider name)
  add_subdirectory(${name})
  set(VIPL_PROVIDERS ${VIPL_PROVIDERS} ${name} CACHE INTERNAL "")
endfunction()
