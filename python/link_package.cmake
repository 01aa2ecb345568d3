# cmake -DSOURCE=python/dask_caps -DDEST=build/python/dask_caps -P link_package.cmake
# Links every .py and .pyi file and py.typed of SOURCE into DEST and removes
# links in DEST whose file is gone, so that DEST is the package with the
# extension beside it, typed as the installed one is.
file(MAKE_DIRECTORY ${DEST})
file(GLOB sources RELATIVE ${SOURCE} ${SOURCE}/*.py ${SOURCE}/*.pyi ${SOURCE}/py.typed)
foreach(name ${sources})
  if(NOT IS_SYMLINK ${DEST}/${name})
    file(CREATE_LINK ${SOURCE}/${name} ${DEST}/${name} SYMBOLIC)
  endif()
endforeach()
file(GLOB linked RELATIVE ${DEST} ${DEST}/*.py ${DEST}/*.pyi ${DEST}/py.typed)
foreach(name ${linked})
  if(IS_SYMLINK ${DEST}/${name} AND NOT EXISTS ${SOURCE}/${name})
    file(REMOVE ${DEST}/${name})
  endif()
endforeach()
