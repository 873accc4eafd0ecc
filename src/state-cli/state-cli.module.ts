/** The `svc state ...` commands (nest-commander), see {@link StateCommand}. */
import { Module } from '@nestjs/common';
import { StateCommand, StateExportCommand, StateImportCommand } from './state.commands';

@Module({ providers: [StateCommand, StateExportCommand, StateImportCommand] })
export class StateCliModule {}
