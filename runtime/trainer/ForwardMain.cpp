//===- ForwardMain.cpp - `bmrt-forward`: run a compiled forward model -----===//
//
//   bmrt-forward DIR INPUTS.safetensors OUTPUTS.safetensors [--device NAME]
//
// Runs DIR/forward.bmp (what `bmc compile` wrote beside the trainer) with
// DIR's step-0 parameters (params.safetensors, or generated from init.json
// when trainer.json names it) on the inputs of INPUTS (by graph input name)
// and writes the model's outputs ("output0", ...). The tests compare it with
// onnxruntime on the same ONNX file; it is a developer tool, not part of a
// training run. --device runs it on another backend (the CPU's by default),
// so that a GPU's forward can be compared with the CPU's on the same files.
//
//===----------------------------------------------------------------------===//

#include "InitialParameters.h"
#include "TrainerJson.h"

#include "runtime/checkpoint/Safetensors.h"

#include "bmrt/Backend.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"

#include <cstdio>
#include <cstring>

namespace {

using namespace bmrt;

/// Copies the tensor called `name` from `file` into `view` on `device`.
void load(Device &device, const SafetensorsFile &file, const std::string &what,
          const std::string &name, const TensorView &view) {
  const HostTensor &t = requireTensor(file.tensors, name, view, what);
  device.copyToDevice(view.data, t.data.data(), view.bytes(),
                      device.computeStream());
}

void run(const std::string &dir, const std::string &inputsPath,
         const std::string &outputsPath, const std::string &backend) {
  std::string path = dir + "/" + kForwardProgramFile;
  Program program = loadProgram(path);
  BMRT_CHECK(!program.outputs.empty(),
             "'" + path + "' is not a forward program");
  std::unique_ptr<Device> device = createDevice(backend);
  Executor executor(program, *device, path);
  InitialParameters params = InitialParameters::ofFolder(dir);
  for (int slot : program.slotsOf(SlotKind::Param)) {
    const TensorView &view = executor.view(slot);
    std::vector<uint8_t> host(view.bytes());
    params.readBox(program.slots[slot].name, view, {},
                   Shape(view.shape.size(), 0), view.shape, host.data());
    device->copyToDevice(view.data, host.data(), view.bytes(),
                         device->computeStream());
    device->computeStream().synchronize();
  }
  SafetensorsFile inputs = readSafetensors(inputsPath);
  for (int slot : program.slotsOf(SlotKind::Input))
    load(*device, inputs, "'" + inputsPath + "'", program.slots[slot].name,
         executor.view(slot));
  executor.run();
  std::vector<std::vector<char>> host(program.outputs.size());
  std::vector<TensorRef> outputs;
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const TensorView &v = executor.view(program.outputs[i]);
    host[i].resize(v.bytes());
    device->copyToHost(host[i].data(), v.data, v.bytes(),
                       device->computeStream());
    outputs.push_back(
        {"output" + std::to_string(i), v.dtype, v.shape, host[i].data()});
  }
  device->computeStream().synchronize();
  writeSafetensors(outputsPath, outputs);
}

} // namespace

int main(int argc, char **argv) {
  bool withDevice = argc == 6 && std::strcmp(argv[4], "--device") == 0;
  if (argc != 4 && !withDevice) {
    std::fprintf(stderr, "usage: bmrt-forward DIR INPUTS.safetensors "
                         "OUTPUTS.safetensors [--device NAME]\n");
    return 2;
  }
  try {
    run(argv[1], argv[2], argv[3], withDevice ? argv[5] : "cpu");
    return 0;
  } catch (const bmrt::Error &e) {
    std::fprintf(stderr, "bmrt-forward: error: %s\n", e.what());
    return 1;
  }
}
