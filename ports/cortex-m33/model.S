/* The .keel image, assembled into its own section; the linker script places that section in
   flash, 64-byte aligned, between keel_model_start and keel_model_end. KEEL_MODEL_PATH comes
   from CMakeLists.txt (the file `keel convert` wrote into the build directory). */
  .section .keel_model, "a", %progbits
  .balign 64
  .incbin KEEL_MODEL_PATH
